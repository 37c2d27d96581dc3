// Package presence is the device-connectivity service of Centrifuge §4, built
// on Fuge: each device publishes its current address under its id, and anyone
// may ask for it. The pool keeps the addresses in memory only; a server that
// crashes loses its share, and the devices publish again when told.
//
// # The server
//
// Server answers PUT /devices/{id} (body: the address; 204) and
// GET /devices/{id} (200 with the address, or 404). The device id is also the
// routing key, sent in the routing header (X-Fuge-Key), so fuge-proxy or Envoy
// sends every request for a device to the one server holding its lease. It
// runs behind ownerguard's middleware, and follows the five steps of PRS
// Fig. 4:
//
//  1. the guard gets an ownership handle for the key, or answers 421, and
//     passes the handle in the request's context;
//  2. the handler discards stored state whose handle no longer passes
//     CheckContinuousOwnership (its generation is not the one held now): the
//     key was lost and regained since, so it may have been written
//     elsewhere in between;
//  3. it does the work, storing any new state with the request's handle;
//  4. the guard checks that the lease was held throughout (the generation is
//     still held), and otherwise replaces the answer with 503;
//  5. the guard sends the answer, stamped with the server's name
//     (Fuge-Owner) and the generation (Fuge-Generation).
//
// The ownership upcall drops the state of revoked ranges at once (Drop);
// step 2 makes that an optimization, not a condition of correctness.
//
//	var srv *presence.Server
//	owner, _ := ownerguard.NewOwner(ownerguard.OwnerConfig{
//		Managers: managers, Namespace: "default", Name: name, Addr: addr,
//		OnOwnership: func(_, revoked []ring.Range) { srv.Drop(revoked) },
//	})
//	srv = presence.NewServer(owner)
//	owner.Start(ctx)
//	guard, _ := ownerguard.NewGuard(owner, ownerguard.GuardConfig{Name: name})
//	http.Serve(ln, guard.HTTP(srv))
//
// Every manager port is mutual TLS, and the manager gives a name's leases
// only to the holder of that name's certificate: the owner dials with
// OwnerConfig.DialOptions set to grpc.WithTransportCredentials over a TLS
// configuration that presents owner-<namespace>-<name>.crt (fugectl certs
// init --owner NS/NAME writes it) and trusts the cluster's CA. The
// presence HTTP port itself is plain.
//
// cmd/presence-server is that program, with the TLS flags of every Fuge
// binary: --tls-dir DIR (default fuge-certs), or --tls-ca, --tls-cert and
// --tls-key, or --insecure for a manager run with --insecure.
//
// # The client
//
// Client publishes and resolves addresses through the router, and remembers
// what it published. Given to a Lookup as its loss-notification upcall
// (lb.LookupConfig.OnLoss = client.OnLoss), it publishes again every device
// whose key lies in a lost range: Centrifuge's clients recreate soft state,
// so the pool needs no disk and no replicas.
package presence
