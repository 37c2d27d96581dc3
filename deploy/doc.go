// Package deploy holds no code: its directory has what a deployment needs,
// and its tests check it.
//
//   - kubernetes/: the managers (a StatefulSet of three behind a headless
//     Service), fuge-proxy (a Deployment) and an example pool of owners
//     (presence-server), with probes, resource requests and certificates
//     from a Secret. TestKubernetesManifests decodes every object with the
//     Kubernetes API types, unknown fields being errors, and checks that
//     they fit together.
//   - grafana/fuge.json: a Grafana dashboard of the managers' and the
//     proxies' metrics. TestGrafanaDashboard checks that every query names
//     a metric a running manager and proxy export.
//   - ../Dockerfile: the image every manifest runs. TestDockerfile checks
//     that it builds what the manifests run.
//
// README.md says how to make the certificates' Secret and the image.
package deploy
