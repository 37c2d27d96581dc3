package ownerguard_test

import (
	"context"
	"log"
	"net/http"

	"github.com/fuge-project/fuge/ownerguard"
	"github.com/fuge-project/fuge/ring"
)

// A backend runs one Owner and checks every request's key against it
// (PRS Fig. 4): take a handle before reading state, and check continuity
// before acting on what was read.
func ExampleOwner() {
	owner, err := ownerguard.NewOwner(ownerguard.OwnerConfig{
		Managers:  []string{"10.0.0.10:7401", "10.0.0.11:7401", "10.0.0.12:7401"},
		Namespace: "chat",
		Name:      "backend-1",
		Addr:      "10.0.0.1:8080",
		OnOwnership: func(granted, revoked []ring.Range) {
			log.Printf("granted %v, revoked %v", granted, revoked)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := owner.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer owner.Close()

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h, ok := owner.GetOwnershipHandleKey(r.Header.Get("X-Fuge-Key"))
		if !ok {
			http.Error(w, "not the owner", http.StatusMisdirectedRequest)
			return
		}
		// ... read the key's state, tagged with h.Gen ...
		if !owner.CheckContinuousOwnership(h) {
			http.Error(w, "lost the key", http.StatusMisdirectedRequest)
			return
		}
		// ... answer ...
	})
}
