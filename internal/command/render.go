package command

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"

	"evals.si/operator/evalsi"
	"evals.si/operator/render"
)

// RenderFlags are the operator settings that rendering depends on, shared by every command that
// renders (run, render, webhook, dev).
var RenderFlags = []cli.Flag{
	&cli.StringFlag{Name: "default-image", Value: "evalsi/platform:latest", Usage: "platform image of Evaluators and SandboxClasses that name none"},
	&cli.StringFlag{Name: "vllm-image", Value: render.DefaultVLLMImage, Usage: "image of CheckpointServers that name none"},
	&cli.StringFlag{Name: "sandbox-namespace", Value: "evalsi-sandbox", Usage: "namespace that SandboxClass pools run in"},
	&cli.StringFlag{Name: "api-url", Value: "http://evalsid:8080", Usage: "evalsid's base URL, given to workers and to KEDA's queue-depth trigger"},
	&cli.StringFlag{Name: "api-ca-secret", Usage: "the Secret, in each pool's namespace, whose ca.crt verifies an https evalsid of a private CA: pool pods mount it beside their token (" + render.APICAFileEnv + " names it); default: the image's system roots"},
	&cli.StringFlag{Name: "workload-certificate-signer", Usage: "the signer of pool pods' client certificates for evalsid (a podCertificate projected volume beside their token, " + render.ClientCredentialsFileEnv + " names it), such as " + evalsi.WorkloadSigner + " of chart evalsi-crds; default: pools present their token alone"},
	&cli.StringFlag{Name: "keda-cluster-authentication", Usage: "the ClusterTriggerAuthentication KEDA reads every pool's queue with (the platform's queue reader's token and client certificate, chart evalsi-crds's keda.queueReader); default: a TriggerAuthentication per pool with the namespace's " + evalsi.QueueReaderServiceAccount + " token"},
	&cli.StringFlag{Name: "pool-token-audience", Value: render.DefaultTokenAudience, Usage: "audience of the projected service-account tokens pool pods present to evalsid"},
	MaxPoolReplicasFlag,
	&cli.StringFlag{Name: "api-network-peers", Usage: "the NetworkPolicy peers through which pools reach evalsid, a JSON list such as [{\"ipBlock\":{\"cidr\":\"203.0.113.10/32\"}}]; required for an evalsid outside the cluster; default: evalsid's pods (app.kubernetes.io/name=evalsid) in the namespace of --api-url's Service"},
	&cli.StringSliceFlag{Name: "kubernetes-api-cidrs", Usage: "the Kubernetes API server's endpoint addresses (CIDRs), the only ones a pod rung launcher may reach on 443 and 6443 (repeatable); default: any address on those ports"},
	&cli.IntFlag{Name: "api-network-port", Usage: "the port evalsid's pods serve on, the only one pools may reach them on; default: --api-url's port"},
}

// MaxPoolReplicasFlag is the platform's bound on an Evaluator's replicas, which admission,
// validate and the operator hold specs to.
var MaxPoolReplicasFlag = &cli.IntFlag{Name: "max-pool-replicas", Value: render.DefaultMaxPoolReplicas,
	Usage: "most replicas an Evaluator may ask for (spec.replicas and every count of spec.autoscaling); 0: no bound"}

// RenderOptions reads RenderFlags and checks that the pools it renders can reach evalsid at
// --api-url through their NetworkPolicies (render.CheckAPIEgress).
func RenderOptions(c *cli.Context) (render.Options, error) {
	opts, err := ReadRenderOptions(c)
	if err != nil {
		return render.Options{}, err
	}
	if err := render.CheckAPIEgress(opts); err != nil {
		return render.Options{}, cli.Exit(fmt.Sprintf("--api-url, --api-network-peers: %v", err), ExitUsage)
	}
	return opts, nil
}

// ReadRenderOptions reads RenderFlags without checking evalsid's address: for a command that
// fills in the address itself (dev serves its own evalsid), and checks it then.
func ReadRenderOptions(c *cli.Context) (render.Options, error) {
	var peers []any
	if p := c.String("api-network-peers"); p != "" {
		var list []map[string]any
		if err := json.Unmarshal([]byte(p), &list); err != nil {
			return render.Options{}, cli.Exit(fmt.Sprintf("--api-network-peers %s: not a JSON list of objects: %v", p, err), ExitUsage)
		}
		for _, peer := range list {
			peers = append(peers, peer)
		}
	}
	for _, cidr := range c.StringSlice("kubernetes-api-cidrs") {
		if _, _, err := net.ParseCIDR(cidr); err != nil {
			return render.Options{}, cli.Exit(fmt.Sprintf("--kubernetes-api-cidrs=%s: not a CIDR such as 10.0.0.1/32: %v", cidr, err), ExitUsage)
		}
	}
	if s := c.String("api-ca-secret"); s != "" {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return render.Options{}, cli.Exit(fmt.Sprintf("--api-ca-secret=%s: not a Secret's name: %s", s, strings.Join(errs, "; ")), ExitUsage)
		}
	}
	opts := render.Options{
		DefaultImage:       c.String("default-image"),
		VLLMImage:          c.String("vllm-image"),
		SandboxNamespace:   c.String("sandbox-namespace"),
		APIURL:             strings.TrimRight(c.String("api-url"), "/"),
		APICASecret:        c.String("api-ca-secret"),
		WorkloadSigner:     c.String("workload-certificate-signer"),
		KEDAAuthentication: c.String("keda-cluster-authentication"),
		TokenAudience:      c.String("pool-token-audience"),
		Limits:             render.Limits{MaxPoolReplicas: int32(c.Int("max-pool-replicas"))},
		APIPeers:           peers,
		APIPort:            int32(c.Int("api-network-port")),
		KubernetesAPICIDRs: c.StringSlice("kubernetes-api-cidrs"),
	}
	return opts, nil
}
