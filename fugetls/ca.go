package fugetls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Validity of what InitDir and Issue write.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	LeafValidity = 365 * 24 * time.Hour
)

// Bases of the files InitDir writes: <base>.crt and <base>.key.
const (
	ManagerBase = "manager"
	ProxyBase   = "proxy"
	AdminBase   = "admin"
)

// OwnerBase is the base of an owner's files: owner-<namespace>-<name>.
func OwnerBase(namespace, name string) string { return "owner-" + namespace + "-" + name }

// InitOptions says what InitDir issues besides the CA.
type InitOptions struct {
	// Hosts are the managers' DNS names and IP addresses, for clients that
	// check host names (Envoy); localhost and 127.0.0.1 are always added.
	Hosts []string
	// Owners are the owner identities to issue (namespace and name).
	Owners []ID
	// Now is the start of validity (the caller's clock).
	Now time.Time
}

// ErrExists refuses to overwrite a CA.
var ErrExists = errors.New("fugetls: a CA already exists there")

// InitDir writes a development CA and certificates for the managers
// (manager.crt), a router (proxy.crt), an operator (admin.crt) and the
// owners asked for, into dir. It refuses to overwrite an existing CA.
func InitDir(dir string, o InitOptions) error {
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Fuge development CA", Organization: []string{"fuge"}},
		NotBefore:             o.Now.Add(-time.Hour),
		NotAfter:              o.Now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.key"), "PRIVATE KEY", mustPKCS8(key), 0o600); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	if err := Issue(dir, ManagerBase, ManagerID("manager"), o.Hosts, o.Now); err != nil {
		return err
	}
	if err := Issue(dir, ProxyBase, ProxyID("proxy"), nil, o.Now); err != nil {
		return err
	}
	if err := Issue(dir, AdminBase, AdminID("fugectl"), nil, o.Now); err != nil {
		return err
	}
	for _, id := range o.Owners {
		if err := Issue(dir, OwnerBase(id.Namespace, id.Name), id, nil, o.Now); err != nil {
			return err
		}
	}
	return nil
}

// Issue signs a certificate for id with the CA in dir and writes it as
// dir/<base>.crt and .key. Manager certificates also carry hosts (plus
// localhost and 127.0.0.1) as DNS and IP SANs.
func Issue(dir, base string, id ID, hosts []string, now time.Time) error {
	if err := id.Validate(); err != nil {
		return err
	}
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return fmt.Errorf("%w: the CA in %s: %w", ErrFiles, dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Name, Organization: []string{"fuge"}, OrganizationalUnit: []string{string(id.Role)}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URI()},
	}
	if id.Role == RoleManager {
		for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return err
	}
	// Key first: a Source that sees the new certificate before its key
	// fails to load and keeps the old pair until both are there.
	if err := writePEM(filepath.Join(dir, base+".key"), "PRIVATE KEY", mustPKCS8(key), 0o600); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, base+".crt"), "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func mustPKCS8(k *ecdsa.PrivateKey) []byte {
	b, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err)
	}
	return b
}

// writePEM writes atomically: a temporary file renamed over the old one.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
