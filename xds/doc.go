// Package xds will turn the manager's lease table into Envoy and proxyless
// gRPC resources, so that they route by the same ring: per namespace a
// Listener, a RouteConfiguration hashing the routing header, a RING_HASH
// Cluster with minimum_ring_size = maximum_ring_size = R and a
// ClusterLoadAssignment whose endpoint weights are the owners' virtual-node
// counts, served over state-of-the-world and delta ADS. It arrives with a later
// issue; nothing here yet.
package xds
