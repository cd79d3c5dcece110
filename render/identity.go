package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"evals.si/operator/evalsi"
)

// How pool pods sign in to evalsid (ADR 0012: workloads sign in with projected tokens). Each pool
// runs as a service account of its own (or the one its spec names), mounts no Kubernetes API
// token, and gets a projected service-account token for evalsid's audience, which the kubelet
// rotates; the platform image reads the file that EVALSI_TOKEN_FILE names on every call. evalsid
// verifies it against the cluster's service-account issuer and knows the pool as
// system:serviceaccount:<namespace>:<service account>.
//
// KEDA reads a pool's queue as the namespace's QueueReaderServiceAccount, with a token it mints
// for evalsid's audience (a TriggerAuthentication's boundServiceAccountToken). One account per
// namespace, not per pool: KEDA mints audience-bound tokens only for service accounts its
// configuration names one by one (KEDA_SERVICE_ACCOUNT_TOKEN_AUDIENCES), and evalsid can hold
// that identity to reading queues. The charts create it; the operator does not.
const (
	// QueueReaderServiceAccount is the service account KEDA reads queues as, in each namespace
	// that has autoscaled pools.
	QueueReaderServiceAccount = evalsi.QueueReaderServiceAccount
	// TokenDir is where a pool pod's evalsid token is mounted.
	TokenDir = "/var/run/secrets/evals.si"
	// TokenFile is the token's path.
	TokenFile = TokenDir + "/token"
	// TokenFileEnv is the environment variable that names TokenFile in pool pods.
	TokenFileEnv = "EVALSI_TOKEN_FILE"
	// APICAFile is where a pool pod finds the CA that verifies evalsid, when the platform names
	// one (Options.APICASecret); APICAFileEnv names it.
	APICAFile = TokenDir + "/ca.crt"
	// APICAFileEnv is the environment variable that names APICAFile in pool pods.
	APICAFileEnv = "EVALSI_API_CA_FILE"
	// ClientCredentialsFile is where a pool pod finds its client certificate for evalsid (a PEM
	// bundle: the key, then the certificate chain), when the platform names a workload signer
	// (Options.WorkloadSigner); ClientCredentialsFileEnv names it.
	ClientCredentialsFile = TokenDir + "/credentials.pem"
	// ClientCredentialsFileEnv is the environment variable that names ClientCredentialsFile.
	ClientCredentialsFileEnv = "EVALSI_CLIENT_CREDENTIALS_FILE"
	// DefaultTokenAudience is the audience evalsid expects when the operator is given none.
	DefaultTokenAudience = evalsi.DefaultTokenAudience
	// tokenExpirationSeconds is the projected token's lifetime; the kubelet renews it at 80 %.
	tokenExpirationSeconds = 3600
)

// tokenAudience is the audience of pool tokens.
func tokenAudience(opts Options) string {
	if opts.TokenAudience != "" {
		return opts.TokenAudience
	}
	return DefaultTokenAudience
}

// signInEnv are the variables that name, in a pool pod, the CA verifying evalsid and the pod's
// client certificate, when the platform has them; they follow the pod's other fixed variables,
// so that pods rendered without them are as before.
func signInEnv(opts Options) []EnvVar {
	var env []EnvVar
	if opts.APICASecret != "" {
		env = append(env, EnvVar{Name: APICAFileEnv, Value: APICAFile})
	}
	if opts.WorkloadSigner != "" {
		env = append(env, EnvVar{Name: ClientCredentialsFileEnv, Value: ClientCredentialsFile})
	}
	return env
}

// signIn makes pod run as the service account sa with no Kubernetes API token and a projected
// evalsid token mounted into container (whose fixed environment names it: TokenFileEnv,
// signInEnv), beside the CA that verifies evalsid when the platform names one (ca.crt of the
// Secret Options.APICASecret, which the kubelet reads for the pod: no account of the namespace
// needs to) and the pod's own client certificate when the platform names a workload signer (a
// podCertificate the kubelet asks the signer for, renews before it expires and keeps out of
// any Secret).
func signIn(pod, container map[string]any, sa string, opts Options) {
	pod["serviceAccountName"] = sa
	pod["automountServiceAccountToken"] = false
	sources := []any{map[string]any{
		"serviceAccountToken": map[string]any{
			"audience":          tokenAudience(opts),
			"expirationSeconds": int64(tokenExpirationSeconds),
			"path":              "token",
		},
	}}
	if opts.APICASecret != "" {
		sources = append(sources, map[string]any{"secret": map[string]any{
			"name":  opts.APICASecret,
			"items": []any{map[string]any{"key": "ca.crt", "path": "ca.crt"}},
		}})
	}
	if opts.WorkloadSigner != "" {
		sources = append(sources, map[string]any{"podCertificate": map[string]any{
			"signerName":           opts.WorkloadSigner,
			"keyType":              "ECDSAP256",
			"credentialBundlePath": "credentials.pem",
		}})
	}
	volumes, _ := pod["volumes"].([]any)
	pod["volumes"] = append(volumes, map[string]any{
		"name":      "evalsi-token",
		"projected": map[string]any{"sources": sources},
	})
	mounts, _ := container["volumeMounts"].([]any)
	container["volumeMounts"] = append(mounts, map[string]any{"name": "evalsi-token", "mountPath": TokenDir, "readOnly": true})
}

// serviceAccount renders the service account a pool runs as and KEDA reads its queue as. It
// carries no token Secret and mounts none by default.
func (o Owner) serviceAccount(name, namespace, component string) *unstructured.Unstructured {
	return o.object("v1", "ServiceAccount", name, namespace, component, map[string]any{
		"automountServiceAccountToken": false,
	})
}
