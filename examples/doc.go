// Package examples holds small runnable programs showing how an application
// adopts Fuge. Nothing imports it.
//
//   - presence: the device-connectivity service of Centrifuge §4, a backend
//     behind the ownerguard middleware in PRS's five-step pattern, with a
//     client library that republishes devices when a loss notification
//     covers them;
//   - demo: what `make demo` runs: a manager, presence servers and
//     fuge-proxy on 127.0.0.1, under load, through a crash and a join;
//   - envoy: an Envoy bootstrap for running Envoy in front of the pool;
//   - grpc: a proxyless gRPC key-value service and a client dialing
//     xds:///<namespace>.
package examples
