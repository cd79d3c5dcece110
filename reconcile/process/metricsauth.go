package process

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"

	"evals.si/operator/internal/pki"
)

// metricsAuthTTL is how long an allowed token is trusted without asking the API server again,
// and metricsAuthTokens how many tokens are remembered at most (the least recently used go
// first; every entry goes when it expires, so rotated tokens do not pile up).
const (
	metricsAuthTTL    = time.Minute
	metricsAuthTokens = 256
)

// authorizeMetrics admits a request to next only with a bearer token that the API server
// authenticates (TokenReview, for audience when set) and allows to get /metrics
// (SubjectAccessReview): 401 without a valid token, 403 without the permission (the
// evalsi-metrics-reader ClusterRole grants it).
func authorizeMetrics(kube kubernetes.Interface, audience string, next http.Handler) http.Handler {
	var audiences []string
	if audience != "" {
		audiences = []string{audience}
	}
	allowed := cache.NewLRUExpireCache(metricsAuthTokens)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		key := sha256.Sum256([]byte(token))
		if _, cached := allowed.Get(key); cached {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			http.Error(w, "cannot review the token", http.StatusInternalServerError)
			return
		}
		if !tr.Status.Authenticated || (audience != "" && !slices.Contains(tr.Status.Audiences, audience)) {
			http.Error(w, "the token is not valid", http.StatusUnauthorized)
			return
		}
		user := tr.Status.User
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			http.Error(w, "cannot review access", http.StatusInternalServerError)
			return
		}
		if !sar.Status.Allowed {
			http.Error(w, user.Username+" may not get /metrics", http.StatusForbidden)
			return
		}
		allowed.Add(key, true, metricsAuthTTL)
		next.ServeHTTP(w, r)
	})
}

// selfSignedTLS returns a TLS configuration with a certificate made at start; scrapers verify
// the caller (the token), not the endpoint, as is usual for in-cluster metrics.
func selfSignedTLS() (*tls.Config, error) {
	ca, caKey, err := pki.NewCA("evalsi-operator-metrics", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, key, err := pki.NewLeaf(ca, caKey, x509.Certificate{
		Subject:     pkix.Name{CommonName: "evalsi-operator-metrics"},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{
		Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert,
	}}}, nil
}
