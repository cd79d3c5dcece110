package evalsid

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"evals.si/operator/evalsi"
)

// KubernetesIssuer is evalsid's "kubernetes:" provider: it accepts service-account tokens of one
// Kubernetes cluster, such as the projected tokens of pool pods and of the operator. It reads the
// cluster's issuer and signing keys from the API server's service-account issuer discovery
// (/.well-known/openid-configuration, then /openid/v1/jwks of the same server) and accepts a token
// that one of those keys signed (RS256 or ES256), whose iss is the issuer, whose aud holds
// Audience, and whose lifetime holds now. The identity is the token's subject,
// system:serviceaccount:<namespace>:<name>.
type KubernetesIssuer struct {
	// APIServer is the API server's base URL; Client reaches it (with credentials allowed to read
	// the discovery documents, which every service account is by default).
	APIServer string
	Client    *http.Client
	// Audience is the audience a token must name.
	Audience string
	// Bound, when set, checks that the service account a token names, and the pod it is bound
	// to, still exist with the UIDs it names. evalsid's command always sets it.
	Bound BoundObjects

	mu      sync.Mutex
	issuer  string
	keys    map[string]crypto.PublicKey // by key id
	fetched time.Time
}

// leeway is the clock skew tolerated on a token's expiry and start.
const leeway = 10 * time.Second

// refreshEvery bounds how often a token with an unknown key id makes the keys be read again.
const refreshEvery = 10 * time.Second

// claims are the fields of a service-account token that are checked.
type claims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  audience `json:"aud"`
	Expiry    int64    `json:"exp"`
	NotBefore int64    `json:"nbf"`
	// Kubernetes names what the token is bound to.
	Kubernetes *struct {
		Namespace      string     `json:"namespace"`
		ServiceAccount *objectRef `json:"serviceaccount"`
		Pod            *objectRef `json:"pod"`
		Secret         *objectRef `json:"secret"`
	} `json:"kubernetes.io"`
}

// objectRef is an object a token names, by name and UID.
type objectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// audience is a JWT aud: one string or a list.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// Verify returns the identity of a valid token, or why it is not accepted.
func (k *KubernetesIssuer) Verify(ctx context.Context, token string, now time.Time) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &header); err != nil {
		return "", fmt.Errorf("token header: %w", err)
	}
	key, issuer, err := k.key(ctx, header.Kid)
	if err != nil {
		return "", err
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", fmt.Errorf("token signature: %w", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := verifySignature(header.Alg, key, digest[:], sig); err != nil {
		return "", err
	}
	var c claims
	if err := decodeSegment(parts[1], &c); err != nil {
		return "", fmt.Errorf("token claims: %w", err)
	}
	switch {
	case c.Issuer != issuer:
		return "", fmt.Errorf("issuer %q is not the cluster's (%q)", c.Issuer, issuer)
	case !slices.Contains(c.Audience, k.Audience):
		return "", fmt.Errorf("audience %v does not name %q", []string(c.Audience), k.Audience)
	case c.Expiry == 0 || now.After(time.Unix(c.Expiry, 0).Add(leeway)):
		return "", errors.New("the token has expired")
	case c.NotBefore != 0 && now.Add(leeway).Before(time.Unix(c.NotBefore, 0)):
		return "", errors.New("the token is not valid yet")
	case !strings.HasPrefix(c.Subject, "system:serviceaccount:"):
		return "", fmt.Errorf("subject %q is not a service account", c.Subject)
	}
	if k.Bound != nil {
		if err := k.checkBound(ctx, c); err != nil {
			return "", err
		}
	}
	return c.Subject, nil
}

// checkBound refuses a token whose service account, or the pod it is bound to, no longer exists
// as the object it was issued for. A token bound to a Secret is refused: evalsid reads no Secret.
func (k *KubernetesIssuer) checkBound(ctx context.Context, c claims) error {
	b := c.Kubernetes
	if b == nil || b.ServiceAccount == nil || b.ServiceAccount.UID == "" {
		return errors.New("the token names no service account UID (kubernetes.io claims)")
	}
	if c.Subject != evalsi.ServiceAccountIdentity(b.Namespace, b.ServiceAccount.Name) {
		return fmt.Errorf("subject %q is not the service account the token names", c.Subject)
	}
	if b.Secret != nil {
		return errors.New("tokens bound to a Secret are not accepted")
	}
	refs := map[string]*objectRef{"serviceaccounts": b.ServiceAccount}
	if b.Pod != nil {
		refs["pods"] = b.Pod
	}
	for resource, ref := range refs {
		if ref.UID == "" {
			return fmt.Errorf("the token names its %s without a UID", strings.TrimSuffix(resource, "s"))
		}
		exists, err := k.Bound.Exists(ctx, resource, b.Namespace, ref.Name, ref.UID)
		if err != nil {
			return fmt.Errorf("cannot check that the token's %s still exist: %w", resource, err)
		}
		if !exists {
			return fmt.Errorf("the token's %s %s/%s (uid %s) no longer exists", strings.TrimSuffix(resource, "s"), b.Namespace, ref.Name, ref.UID)
		}
	}
	return nil
}

// key returns the signing key kid and the issuer, reading them again when kid is unknown (a key
// rotated in) and the last read is old enough.
func (k *KubernetesIssuer) key(ctx context.Context, kid string) (crypto.PublicKey, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := k.keys[kid]; ok {
		return key, k.issuer, nil
	}
	if time.Since(k.fetched) < refreshEvery && k.keys != nil {
		return nil, "", fmt.Errorf("no signing key %q in the cluster's keys", kid)
	}
	if err := k.fetch(ctx); err != nil {
		return nil, "", fmt.Errorf("reading the cluster's service-account keys: %w", err)
	}
	if key, ok := k.keys[kid]; ok {
		return key, k.issuer, nil
	}
	return nil, "", fmt.Errorf("no signing key %q in the cluster's keys", kid)
}

// fetch reads the issuer and its keys.
func (k *KubernetesIssuer) fetch(ctx context.Context) error {
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	if err := k.get(ctx, "/.well-known/openid-configuration", &discovery); err != nil {
		return err
	}
	var jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := k.get(ctx, "/openid/v1/jwks", &jwks); err != nil {
		return err
	}
	keys := map[string]crypto.PublicKey{}
	for _, j := range jwks.Keys {
		switch j.Kty {
		case "RSA":
			n, err1 := base64.RawURLEncoding.DecodeString(j.N)
			e, err2 := base64.RawURLEncoding.DecodeString(j.E)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("key %q: %w", j.Kid, err)
			}
			keys[j.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case "EC":
			if j.Crv != "P-256" {
				continue
			}
			x, err1 := base64.RawURLEncoding.DecodeString(j.X)
			y, err2 := base64.RawURLEncoding.DecodeString(j.Y)
			if err := errors.Join(err1, err2); err != nil {
				return fmt.Errorf("key %q: %w", j.Kid, err)
			}
			keys[j.Kid] = &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		}
	}
	k.issuer, k.keys, k.fetched = discovery.Issuer, keys, time.Now()
	return nil
}

func (k *KubernetesIssuer) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(k.APIServer, "/")+path, nil)
	if err != nil {
		return err
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}

// verifySignature checks a JWS signature of digest (SHA-256) with key.
func verifySignature(alg string, key crypto.PublicKey, digest, sig []byte) error {
	switch alg {
	case "RS256":
		pub, ok := key.(*rsa.PublicKey)
		if !ok {
			return errors.New("RS256 token signed with a key that is not RSA")
		}
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest, sig); err != nil {
			return errors.New("the token's signature does not verify")
		}
		return nil
	case "ES256":
		pub, ok := key.(*ecdsa.PublicKey)
		if !ok || len(sig) != 64 {
			return errors.New("ES256 token with a key that is not P-256 or a malformed signature")
		}
		if !ecdsa.Verify(pub, digest, new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return errors.New("the token's signature does not verify")
		}
		return nil
	}
	return fmt.Errorf("signing algorithm %q is not accepted", alg)
}

func decodeSegment(seg string, out any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
