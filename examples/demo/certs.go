package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fuge-project/fuge/examples/internal/tlsflags"
	"github.com/fuge-project/fuge/fugetls"
)

// servers is how many presence servers the demo runs in all (p1..p4).
const servers = 4

// makeCerts writes the run's certificates as a person would, with
// fugectl certs init: a development CA, the manager's, the proxy's, an
// admin's and p1..p4's owner certificates. The demo itself follows the
// lease table with the proxy certificate and asks the manager whether it
// is ready with the admin one. With --insecure there are none.
func (d *demo) makeCerts(ctx context.Context) error {
	d.adminHTTP = &http.Client{Timeout: time.Second}
	if d.opt.insecure {
		// "=true": fuge-manager's --insecure takes a value, the others' are booleans.
		d.tlsArgs = []string{"--insecure=true"}
		d.managerDial = tlsflags.DialOptions(nil)
		d.logf("--insecure: no TLS to the manager, for any process")
		return nil
	}
	d.certs = filepath.Join(d.opt.work, "certs")
	args := []string{"certs", "init", d.certs}
	for i := 1; i <= servers; i++ {
		args = append(args, "--owner", "default/p"+strconv.Itoa(i))
	}
	out, err := exec.CommandContext(ctx, filepath.Join(d.opt.bin, "fugectl"), args...).CombinedOutput()
	log := filepath.Join(d.opt.work, "fugectl-certs.log")
	if werr := os.WriteFile(log, out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("fugectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	d.logf("fugectl %s  (mutual TLS on every manager port; list in %s)", strings.Join(args, " "), log)
	d.tlsArgs = []string{"--tls-dir", d.certs}

	adminSrc, err := fugetls.NewSource(fugetls.DirFiles(d.certs, fugetls.AdminBase))
	if err != nil {
		return err
	}
	d.adminHTTP.Transport = &http.Transport{TLSClientConfig: adminSrc.ClientConfig(fugetls.RoleManager)}
	proxySrc, err := fugetls.NewSource(fugetls.DirFiles(d.certs, fugetls.ProxyBase))
	if err != nil {
		return err
	}
	d.managerDial = tlsflags.DialOptions(proxySrc)
	return nil
}

// managerURL is the manager's admin API URL for path.
func (d *demo) managerURL(path string) string {
	if d.opt.insecure {
		return "http://" + d.managerHTTP + path
	}
	return "https://" + d.managerHTTP + path
}
