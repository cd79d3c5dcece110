// Package podcert is the platform's signer of workload certificates: it issues the
// PodCertificateRequests that kubelets make for pods mounting a podCertificate projected volume
// of signer evalsi.WorkloadSigner, and publishes its CA as a ClusterTrustBundle.
//
// A pod so gets a client certificate without any Secret: the kubelet makes the key, asks for the
// certificate, writes both into the pod's volume and renews them before they expire. The API
// server admits a request only from the node the pod runs on, naming that pod, its UID and its
// service account (NodeRestriction), so the signer trusts the request's fields and no CSR
// content: the certificate names system:serviceaccount:<namespace>:<service account> as its
// common name (the identity evalsid holds it to, beside the pod's token) and as a SPIFFE URI.
//
// The CA is a Secret of the signer's namespace, which the signer makes at its first start when it
// does not exist (tls.crt and tls.key sign; ca.crt, when present, is the bundle to publish, so
// that a rotation publishes the old and new CAs together). It is read again at each request and
// each publication, so a rotated CA signs without a restart.
package podcert
