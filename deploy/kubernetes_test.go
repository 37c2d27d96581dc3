package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded objects of deploy/kubernetes.
type manifests struct {
	namespaces   []corev1.Namespace
	services     map[string]corev1.Service
	statefulSets map[string]appsv1.StatefulSet
	deployments  map[string]appsv1.Deployment
	pdbs         []policyv1.PodDisruptionBudget
}

// decodeManifests reads every YAML document in dir and decodes it with the
// Kubernetes API type of its kind, strictly: an unknown or misspelt field,
// a duplicate key or a kind this test does not know is an error.
func decodeManifests(t *testing.T, dir string) manifests {
	t.Helper()
	m, err := decodeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeDir(dir string) (manifests, error) {
	m := manifests{services: map[string]corev1.Service{}, statefulSets: map[string]appsv1.StatefulSet{}, deployments: map[string]appsv1.Deployment{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return m, fmt.Errorf("no manifests in %s: %v", dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return m, err
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d", filepath.Base(f), i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				return m, fmt.Errorf("%s: %w", where, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "apps/v1 StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				return m, fmt.Errorf("%s: kind %q %q is not one this test checks", where, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return m, fmt.Errorf("%s (%s %s): %w", where, tm.APIVersion, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.namespaces = append(m.namespaces, *o)
			case *corev1.Service:
				m.services[o.Name] = *o
			case *appsv1.StatefulSet:
				m.statefulSets[o.Name] = *o
			case *appsv1.Deployment:
				m.deployments[o.Name] = *o
			case *policyv1.PodDisruptionBudget:
				m.pdbs = append(m.pdbs, *o)
			}
		}
	}
	return m, nil
}

// TestStrictDecoding: the decoder the manifest test relies on refuses a
// misspelt field and a value of the wrong type.
func TestStrictDecoding(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replica: 2\n",
		"wrong type":     "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports: 80\n",
		"unknown kind":   "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeDir(dir); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// commandLine is a container's command and arguments as one string, with
// the shell's line continuations joined.
func commandLine(c corev1.Container) string {
	s := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	return strings.ReplaceAll(s, "\\\n", " ")
}

// flagValue returns the value of --name=value in a command line.
func flagValue(cmd, name string) (string, bool) {
	m := regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `="?([^"\s]+)"?`).FindStringSubmatch(cmd)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func portNumber(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

func checkProbe(t *testing.T, what string, p *corev1.Probe, path, scheme string) {
	t.Helper()
	switch {
	case p == nil:
		t.Errorf("%s: no probe", what)
	case path == "":
		if p.TCPSocket == nil && p.HTTPGet == nil {
			t.Errorf("%s: neither a TCP nor an HTTP probe", what)
		}
	case p.HTTPGet == nil || p.HTTPGet.Path != path || string(p.HTTPGet.Scheme) != scheme && !(scheme == "HTTP" && p.HTTPGet.Scheme == ""):
		t.Errorf("%s: probe %+v, want GET %s over %s", what, p.ProbeHandler, path, scheme)
	}
}

// checkPod checks what every workload needs: resource requests, a
// certificates volume from the Secret fuge-certs mounted where --tls-dir
// points, and only certificate files that fugectl certs init writes.
func checkPod(t *testing.T, what string, spec corev1.PodSpec, cmd string) {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s/%s: no CPU and memory requests", what, c.Name)
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: no memory limit", what, c.Name)
		}
	}
	dir, ok := flagValue(cmd, "tls-dir")
	if !ok {
		t.Errorf("%s: no --tls-dir: every port is mutual TLS", what)
		return
	}
	mounted := false
	for _, c := range spec.Containers {
		for _, vm := range c.VolumeMounts {
			if vm.MountPath != dir {
				continue
			}
			for _, v := range spec.Volumes {
				if v.Name != vm.Name {
					continue
				}
				if v.Secret == nil || v.Secret.SecretName != "fuge-certs" {
					t.Errorf("%s: %s is not the Secret fuge-certs", what, dir)
					continue
				}
				mounted = true
				for _, it := range v.Secret.Items {
					if !regexp.MustCompile(`^(ca\.crt|(manager|proxy|admin|owner-[A-Za-z0-9._-]+)\.(crt|key))$`).MatchString(it.Key) {
						t.Errorf("%s: Secret key %q is not a file fugectl certs init writes", what, it.Key)
					}
					if it.Key == "ca.key" {
						t.Errorf("%s: the CA's key is mounted", what)
					}
				}
			}
		}
	}
	if !mounted {
		t.Errorf("%s: nothing is mounted at --tls-dir %s", what, dir)
	}
}

// checkService checks that svc selects the pods of template labels and
// that its target ports are ports the pod names.
func checkService(t *testing.T, svc corev1.Service, labels map[string]string, c corev1.Container) {
	t.Helper()
	if len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s selects nothing", svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which its pods do not carry", svc.Name, k, v)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.StrVal != "" {
			portNumber(t, c, p.TargetPort.StrVal)
		}
	}
}

// checkManagers checks a --managers list: every manager node, each by the
// headless Service's DNS name and the gRPC port.
func checkManagers(t *testing.T, what, cmd string, sts appsv1.StatefulSet, grpcPort int32) {
	t.Helper()
	list, ok := flagValue(cmd, "managers")
	if !ok {
		t.Errorf("%s: no --managers", what)
		return
	}
	var want []string
	for i := range *sts.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", sts.Name, i, sts.Spec.ServiceName, grpcPort))
	}
	if got := strings.Split(list, ","); !slices.Equal(got, want) {
		t.Errorf("%s: --managers=%s, want %s", what, list, strings.Join(want, ","))
	}
}

// TestKubernetesManifests decodes deploy/kubernetes with the Kubernetes API
// types and checks that the objects fit together: three managers behind a
// headless Service that every address names, probes on /healthz and
// /readyz, resource requests, certificates from the Secret.
func TestKubernetesManifests(t *testing.T) {
	m := decodeManifests(t, "kubernetes")
	if len(m.namespaces) != 1 {
		t.Fatalf("%d Namespaces, want 1", len(m.namespaces))
	}
	ns := m.namespaces[0].Name
	for name, s := range m.statefulSets {
		if s.Namespace != ns {
			t.Errorf("StatefulSet %s is in namespace %q, not %q", name, s.Namespace, ns)
		}
	}
	for name, d := range m.deployments {
		if d.Namespace != ns {
			t.Errorf("Deployment %s is in namespace %q, not %q", name, d.Namespace, ns)
		}
	}

	// The managers.
	mgr, ok := m.statefulSets["fuge-manager"]
	if !ok {
		t.Fatal("no StatefulSet fuge-manager")
	}
	if mgr.Spec.Replicas == nil || *mgr.Spec.Replicas != 3 {
		t.Errorf("fuge-manager replicas %v, want 3", mgr.Spec.Replicas)
	}
	if mgr.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("fuge-manager podManagementPolicy %q: after a full restart no node is ready before two elect a leader, so it must be Parallel", mgr.Spec.PodManagementPolicy)
	}
	if len(mgr.Spec.VolumeClaimTemplates) == 0 {
		t.Error("fuge-manager has no volume for its raft log")
	}
	headless, ok := m.services[mgr.Spec.ServiceName]
	if !ok || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("fuge-manager's serviceName %q is not a headless Service that publishes unready pods", mgr.Spec.ServiceName)
	}
	mc := mgr.Spec.Template.Spec.Containers[0]
	cmd := commandLine(mc)
	checkService(t, headless, mgr.Spec.Template.Labels, mc)
	checkProbe(t, "fuge-manager liveness", mc.LivenessProbe, "/healthz", "HTTPS")
	checkProbe(t, "fuge-manager readiness", mc.ReadinessProbe, "/readyz", "HTTPS")
	checkPod(t, "fuge-manager", mgr.Spec.Template.Spec, cmd)
	grpcPort, adminPort, raftPort := portNumber(t, mc, "grpc"), portNumber(t, mc, "admin"), portNumber(t, mc, "raft")
	for flag, port := range map[string]int32{"raft-addr": raftPort, "grpc-addr": grpcPort, "http-addr": adminPort} {
		if v, _ := flagValue(cmd, flag); !strings.HasSuffix(v, ":"+strconv.Itoa(int(port))) {
			t.Errorf("fuge-manager --%s=%s, want port %d", flag, v, port)
		}
	}
	// Every node but the first joins the first at its admin address, by
	// the headless Service's name; each advertises its own name there.
	join, _ := flagValue(cmd, "join")
	if want := fmt.Sprintf("%s-0.%s.${POD_NAMESPACE}.svc.cluster.local:%d", mgr.Name, mgr.Spec.ServiceName, adminPort); join != want {
		t.Errorf("fuge-manager --join=%s, want %s", join, want)
	}
	for flag, port := range map[string]int32{"advertise-grpc-addr": grpcPort, "advertise-http-addr": adminPort} {
		want := fmt.Sprintf("${POD_NAME}.%s.${POD_NAMESPACE}.svc.cluster.local:%d", mgr.Spec.ServiceName, port)
		if v, _ := flagValue(cmd, flag); v != want {
			t.Errorf("fuge-manager --%s=%s, want %s", flag, v, want)
		}
	}
	if !strings.Contains(cmd, `if [ "${POD_NAME##*-}" != "0" ]`) {
		t.Error("fuge-manager: the first node must bootstrap (no --join) and the others join it")
	}
	if v, _ := flagValue(cmd, "node-id"); v != "${POD_NAME}" {
		t.Errorf("fuge-manager --node-id=%s, want the pod's name", v)
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Spec.MaxUnavailable == nil || m.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Error("no PodDisruptionBudget keeping two of three managers up")
	}

	// fuge-proxy.
	px, ok := m.deployments["fuge-proxy"]
	if !ok {
		t.Fatal("no Deployment fuge-proxy")
	}
	if px.Spec.Replicas == nil || *px.Spec.Replicas < 2 {
		t.Errorf("fuge-proxy replicas %v, want at least 2", px.Spec.Replicas)
	}
	pc := px.Spec.Template.Spec.Containers[0]
	pcmd := commandLine(pc)
	checkManagers(t, "fuge-proxy", pcmd, mgr, grpcPort)
	checkProbe(t, "fuge-proxy readiness", pc.ReadinessProbe, "/healthz", "HTTP")
	checkProbe(t, "fuge-proxy liveness", pc.LivenessProbe, "", "")
	checkPod(t, "fuge-proxy", px.Spec.Template.Spec, pcmd)
	checkService(t, m.services["fuge-proxy"], px.Spec.Template.Labels, pc)

	// The example owners: stable names, each its certificate, each its
	// own address.
	pr, ok := m.statefulSets["presence"]
	if !ok {
		t.Fatal("no StatefulSet presence (the example owners)")
	}
	oc := pr.Spec.Template.Spec.Containers[0]
	ocmd := commandLine(oc)
	checkManagers(t, "presence", ocmd, mgr, grpcPort)
	checkProbe(t, "presence readiness", oc.ReadinessProbe, "", "")
	checkProbe(t, "presence liveness", oc.LivenessProbe, "", "")
	checkPod(t, "presence", pr.Spec.Template.Spec, ocmd)
	checkService(t, m.services[pr.Spec.ServiceName], pr.Spec.Template.Labels, oc)
	if v, _ := flagValue(ocmd, "name"); v != "$(POD_NAME)" {
		t.Errorf("presence --name=%s, want the pod's name", v)
	}
	if v, _ := flagValue(ocmd, "listen"); !strings.HasPrefix(v, "$(POD_IP):") {
		t.Errorf("presence --listen=%s: each owner must register its own address, its pod's IP", v)
	}
	nsName, _ := flagValue(ocmd, "namespace")
	for i := range *pr.Spec.Replicas {
		key := fmt.Sprintf("owner-%s-%s-%d.crt", nsName, pr.Name, i)
		found := false
		for _, v := range pr.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				for _, it := range v.Secret.Items {
					found = found || it.Key == key
				}
			}
		}
		if !found {
			t.Errorf("presence-%d's certificate %s is not mounted", i, key)
		}
	}
}

// TestDockerfile checks that the image builds what the manifests run: each
// binary a container starts is built by the Dockerfile from a main package
// that exists and builds without cgo. (The image itself cannot be built
// here: there is no container engine.)
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("the Dockerfile does not build static binaries (CGO_ENABLED=0)")
	}
	built := map[string]string{} // binary name -> package
	for _, p := range regexp.MustCompile(`(\./(?:cmd|examples)/[A-Za-z0-9/_-]+)`).FindAllString(df, -1) {
		built[filepath.Base(p)] = p
	}
	m := decodeManifests(t, "kubernetes")
	var pods []corev1.PodSpec
	for _, s := range m.statefulSets {
		pods = append(pods, s.Spec.Template.Spec)
	}
	for _, d := range m.deployments {
		pods = append(pods, d.Spec.Template.Spec)
	}
	for _, p := range pods {
		for _, c := range p.Containers {
			for _, bin := range regexp.MustCompile(`/usr/local/bin/([A-Za-z0-9_-]+)`).FindAllStringSubmatch(commandLine(c), -1) {
				if _, ok := built[bin[1]]; !ok {
					t.Errorf("container %s runs %s, which the Dockerfile does not build", c.Name, bin[1])
				}
			}
		}
	}
	var pkgs []string
	for _, p := range built {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Name}}"}, pkgs...)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list %v: %v\n%s", pkgs, err, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasSuffix(l, " main") {
			t.Errorf("the Dockerfile builds %s, not a main package", l)
		}
	}
}
