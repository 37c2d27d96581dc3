// Package proxy will hold fuge-proxy, a fasthttp reverse proxy in front of a
// pool: it hashes the routing header (X-Fuge-Key) exactly as package ring does,
// forwards each request to the lease holder found by the lb Lookup, refuses a
// request that repeats the header, and retries briefly (2 s budget, backoff
// from 5 ms) while a range changes hands. It arrives with the data plane in a
// later issue; nothing here yet.
package proxy
