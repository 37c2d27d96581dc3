package fugetls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/fuge-project/fuge/lease"
)

// TrustDomain is the host part of every Fuge ID.
const TrustDomain = "fuge"

// Role is what an identity may do.
type Role string

// The roles.
const (
	RoleManager Role = "manager"
	RoleOwner   Role = "owner"
	RoleProxy   Role = "proxy"
	RoleAdmin   Role = "admin"
)

// ErrNoIdentity is a peer without a certificate, or one that names no Fuge
// ID.
var ErrNoIdentity = errors.New("fugetls: no Fuge identity")

// ID is one identity. Namespace is set for owners only.
type ID struct {
	Role      Role
	Namespace string
	Name      string
}

// ManagerID, OwnerID, ProxyID and AdminID build the IDs of each role.
func ManagerID(node string) ID          { return ID{Role: RoleManager, Name: node} }
func OwnerID(namespace, name string) ID { return ID{Role: RoleOwner, Namespace: namespace, Name: name} }
func ProxyID(name string) ID            { return ID{Role: RoleProxy, Name: name} }
func AdminID(name string) ID            { return ID{Role: RoleAdmin, Name: name} }

// String is the ID's URI.
func (id ID) String() string { return id.URI().String() }

// URI is the ID as a certificate's URI SAN.
func (id ID) URI() *url.URL {
	p := "/" + string(id.Role) + "/" + id.Name
	if id.Role == RoleOwner {
		p = "/ns/" + id.Namespace + "/owner/" + id.Name
	}
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: p}
}

// Validate checks the ID's parts (names as lease.ValidName).
func (id ID) Validate() error {
	switch id.Role {
	case RoleOwner:
		if err := lease.ValidName("namespace", id.Namespace); err != nil {
			return err
		}
	case RoleManager, RoleProxy, RoleAdmin:
		if id.Namespace != "" {
			return fmt.Errorf("%w: a %s ID has no namespace", ErrNoIdentity, id.Role)
		}
	default:
		return fmt.Errorf("%w: unknown role %q", ErrNoIdentity, id.Role)
	}
	return lease.ValidName(string(id.Role)+" name", id.Name)
}

// ParseID reads a Fuge ID from a URI.
func ParseID(u *url.URL) (ID, error) {
	if u == nil || u.Scheme != "spiffe" || u.Host != TrustDomain || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return ID{}, fmt.Errorf("%w: %v is not a spiffe://%s/ ID", ErrNoIdentity, u, TrustDomain)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	var id ID
	switch {
	case len(parts) == 4 && parts[0] == "ns" && parts[2] == string(RoleOwner):
		id = OwnerID(parts[1], parts[3])
	case len(parts) == 2:
		id = ID{Role: Role(parts[0]), Name: parts[1]}
	default:
		return ID{}, fmt.Errorf("%w: %v has no role", ErrNoIdentity, u)
	}
	if err := id.Validate(); err != nil {
		return ID{}, fmt.Errorf("%w: %v: %w", ErrNoIdentity, u, err)
	}
	return id, nil
}

// PeerID is the ID in the peer's certificate, which the handshake verified
// (Source's configurations refuse a chain that does not verify).
func PeerID(cs tls.ConnectionState) (ID, error) {
	if len(cs.PeerCertificates) == 0 {
		return ID{}, fmt.Errorf("%w: the peer sent no certificate", ErrNoIdentity)
	}
	leaf := cs.PeerCertificates[0]
	if len(leaf.URIs) != 1 {
		return ID{}, fmt.Errorf("%w: the certificate has %d URI SANs, want one", ErrNoIdentity, len(leaf.URIs))
	}
	return ParseID(leaf.URIs[0])
}
