// Package fugetls is Fuge's mutual TLS: identities in certificates, a
// development certificate authority, and TLS configurations that reload
// their files from disk.
//
// Identity. Every process presents a certificate whose one URI SAN is a
// SPIFFE-style ID in the trust domain "fuge":
//
//	spiffe://fuge/manager/<node>          a manager node (raft, gRPC, admin)
//	spiffe://fuge/ns/<namespace>/owner/<name>   an owner: the only holder of that name's leases
//	spiffe://fuge/proxy/<name>            a router: Lookup streams, Envoy and gRPC xDS
//	spiffe://fuge/admin/<name>            an operator: admin writes, cluster membership, pprof
//
// A name is then an identity: the manager refuses an owner session whose
// certificate does not name its namespace and owner name, so squatting a
// crashed owner's name or joining the pool needs a certificate the CA
// issued. Peers are authorized by ID, not by host name, so the same
// certificates work behind NAT, relays and Kubernetes Services.
//
// Rotation. A Source re-reads its CA, certificate and key when one of the
// files changes (checked at each handshake, a stat per file): write the new
// files and new connections use them, with no restart. A half-written set
// that does not load keeps the previous one.
//
// Applications use it to give their Owner or Lookup its certificate:
//
//	src, err := fugetls.Options{Dir: "fuge-certs"}.Source(fugetls.OwnerBase("default", "p1"))
//	creds := credentials.NewTLS(src.ClientConfig(fugetls.RoleManager))
//	owner, err := ownerguard.NewOwner(ownerguard.OwnerConfig{...,
//		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)}})
//
// The CA that InitDir writes is for development and tests (make demo):
// production deployments issue the same IDs from their own CA (cert-manager,
// SPIRE), and point the same flags at the files.
package fugetls
