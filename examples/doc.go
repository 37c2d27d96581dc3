// Package examples will hold small runnable programs showing how an
// application adopts Fuge: a backend wrapped in ownerguard middleware
// (net/http, fasthttp, gRPC), a pool behind fuge-proxy or Envoy, and a
// proxyless gRPC client dialing xds:///<namespace>. Nothing imports it. It
// arrives with a later issue; nothing here yet.
package examples
