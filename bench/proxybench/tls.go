package main

// Every use of fugetls is in this file, so that a move of the package
// touches nothing else.

import (
	"crypto/tls"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fuge-project/fuge/fugetls"
)

// ownerName is one owner identity: namespace and name.
type ownerName struct{ ns, name string }

// initCerts writes a development CA into dir, as fugectl certs init does,
// with the manager's, the proxy's, the admin's and the owners'
// certificates.
func initCerts(dir string, owners []ownerName) error {
	var ids []fugetls.ID
	for _, o := range owners {
		ids = append(ids, fugetls.OwnerID(o.ns, o.name))
	}
	return fugetls.InitDir(dir, fugetls.InitOptions{Owners: ids, Now: time.Now()})
}

// ownerDialOptions dial the managers as owner ns/name, with its certificate.
func ownerDialOptions(dir, ns, name string) ([]grpc.DialOption, error) {
	src, err := fugetls.NewSource(fugetls.DirFiles(dir, fugetls.OwnerBase(ns, name)))
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig(fugetls.RoleManager)))}, nil
}

// adminClient is an HTTPS client of the managers' admin API with the
// admin certificate.
func adminClient(dir string) (*http.Client, error) {
	src, err := fugetls.NewSource(fugetls.DirFiles(dir, fugetls.AdminBase))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: src.ClientConfig(fugetls.RoleManager)}}, nil
}

// backendServerTLS is a backend's server configuration: owner ns/name's
// certificate, and only proxies admitted (what fuge-proxy --backend-tls
// expects of an owner).
func backendServerTLS(dir, ns, name string) (*tls.Config, error) {
	src, err := fugetls.NewSource(fugetls.DirFiles(dir, fugetls.OwnerBase(ns, name)))
	if err != nil {
		return nil, err
	}
	return src.ServerConfig(false, fugetls.RoleProxy), nil
}
