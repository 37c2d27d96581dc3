module github.com/fuge-project/fuge

go 1.26

require github.com/cespare/xxhash/v2 v2.3.0 // indirect
