module github.com/fuge-project/fuge

go 1.26

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
)
