package fugetls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Files names a process's CA bundle, certificate and key (PEM).
type Files struct {
	CA, Cert, Key string
}

// DirFiles is the layout InitDir writes: dir/ca.crt, dir/<base>.crt and
// dir/<base>.key.
func DirFiles(dir, base string) Files {
	return Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key")}
}

// Source serves a certificate and the CA bundle that verifies peers, and
// re-reads them when a file changes.
type Source struct {
	f  Files
	mu sync.Mutex
	st *state
}

type state struct {
	stamp [3]fileStamp
	cert  *tls.Certificate
	id    ID
	roots *x509.CertPool
}

type fileStamp struct {
	size, mod int64
}

// ErrFiles is a certificate set that does not load.
var ErrFiles = errors.New("fugetls: certificates")

// NewSource loads f; it fails if the files are missing or do not match.
func NewSource(f Files) (*Source, error) {
	s := &Source{f: f}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.st = st
	return s, nil
}

// ID is the identity in the current certificate.
func (s *Source) ID() ID { return s.current().id }

func (s *Source) stamps() ([3]fileStamp, error) {
	var out [3]fileStamp
	for i, p := range []string{s.f.CA, s.f.Cert, s.f.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.Size(), fi.ModTime().UnixNano()}
	}
	return out, nil
}

func (s *Source) load() (*state, error) {
	stamp, err := s.stamps()
	if err != nil {
		return nil, fmt.Errorf("%w: %w (make a set with fugectl certs init DIR)", ErrFiles, err)
	}
	caPEM, err := os.ReadFile(s.f.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFiles, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrFiles, s.f.CA)
	}
	cert, err := tls.LoadX509KeyPair(s.f.Cert, s.f.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %w", ErrFiles, s.f.Cert, s.f.Key, err)
	}
	leaf := cert.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: %s is not issued by the CA in %s: %w", ErrFiles, s.f.Cert, s.f.CA, err)
	}
	id, err := PeerID(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFiles, s.f.Cert, err)
	}
	return &state{stamp: stamp, cert: &cert, id: id, roots: roots}, nil
}

// current returns the loaded set, re-reading the files first if one of
// them changed and the new set loads.
func (s *Source) current() *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stamp, err := s.stamps(); err == nil && stamp != s.st.stamp {
		if st, err := s.load(); err == nil {
			s.st = st
		}
	}
	return s.st
}

// verify checks a peer's chain against the current CA and its ID against
// the roles allowed (any role when allow is empty).
func (s *Source) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage, allow []Role) error {
	if len(certs) == 0 {
		return fmt.Errorf("%w: the peer sent no certificate", ErrNoIdentity)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: s.current().roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("fugetls: peer certificate: %w", err)
	}
	id, err := PeerID(tls.ConnectionState{PeerCertificates: certs})
	if err != nil {
		return err
	}
	if len(allow) > 0 && !slices.Contains(allow, id.Role) {
		return fmt.Errorf("fugetls: peer %v has role %s, want %v", id, id.Role, allow)
	}
	return nil
}

// ServerConfig is a server's TLS configuration. With optional false it
// requires a client certificate of one of the roles allow (any role when
// empty); with optional true a client without a certificate is admitted
// (the handler decides, e.g. health checks), but one that sends a
// certificate must send a valid one.
func (s *Source) ServerConfig(optional bool, allow ...Role) *tls.Config {
	auth := tls.RequireAnyClientCert
	if optional {
		auth = tls.RequestClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: auth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if optional && len(cs.PeerCertificates) == 0 {
				return nil
			}
			return s.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, allow)
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// ClientConfig is a client's TLS configuration: it presents the current
// certificate and accepts a server whose certificate the current CA issued
// for one of the roles allow (any role when empty). Servers are checked by
// ID, not host name.
func (s *Source) ClientConfig(allow ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and the ID are checked in VerifyConnection, against
		// the CA as it is now (rotation), not by host name.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, allow)
		},
	}
}
