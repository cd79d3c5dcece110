package isolation

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Rungs, as a SandboxClass names them.
const (
	RungPod        = "pod"
	RungBubblewrap = "bubblewrap"
	RungLandlock   = "landlock"
)

// MetadataTarget is the name of the target that must never answer: a cloud's instance metadata
// at 169.254.169.254. The other addresses of MetadataAddresses are its namesakes, named
// MetadataTarget-<host>.
const MetadataTarget = "metadata"

// MetadataAddresses are where clouds serve instance metadata and credentials: an address of each
// range every pool's NetworkPolicy keeps its pods from (render's metadataRanges), the first the
// common one. A floor holds each to not answering.
var MetadataAddresses = []string{
	"169.254.169.254:80", // AWS, Google Cloud, Azure, Oracle, DigitalOcean, Huawei
	"169.254.170.2:80",   // AWS's container credentials
	"169.254.170.23:80",  // AWS's EKS Pod Identity agent
	"169.254.0.23:80",    // Tencent Cloud
	"168.63.129.16:80",   // Azure's WireServer
	"100.100.100.200:80", // Alibaba Cloud
	"[fd00:ec2::254]:80", // AWS over IPv6
	"[fd00:ec2::23]:80",  // AWS's Pod Identity agent over IPv6
	"[fd20:ce::254]:80",  // Google Cloud over IPv6
}

// MetadataTargets are the probe's targets of MetadataAddresses, each Closed: the first named
// MetadataTarget, the others MetadataTarget-<host>.
func MetadataTargets() []Target {
	targets := make([]Target, len(MetadataAddresses))
	for i, addr := range MetadataAddresses {
		name := MetadataTarget
		if i > 0 {
			host, _, _ := net.SplitHostPort(addr)
			name += "-" + host
		}
		targets[i] = Target{Name: name, Address: addr, Closed: true}
	}
	return targets
}

// IsMetadata reports whether the target name is one of MetadataTargets'.
func IsMetadata(name string) bool {
	return name == MetadataTarget || strings.HasPrefix(name, MetadataTarget+"-")
}

// Floor is what a sandbox class needs of its node before a trial may run in its pool.
type Floor struct {
	Rung string
	// UserNamespaces says the class runs its pods in user namespaces (hostUsers: false).
	UserNamespaces bool
	// Unreachable names the targets that must not answer (MetadataTarget, and any the class adds).
	Unreachable []string
}

// Missing says what r lacks of the floor, each as a short phrase naming what is missing; none
// means the floor is met.
//
//   - landlock: an ABI, a ruleset that really restricts a path, seccomp filtering,
//     no_new_privs and no effective capabilities (what Pod Security restricted gives);
//   - bubblewrap with user namespaces: the pod in a user namespace of its own, and a nested one
//     that maps root (bubblewrap's own);
//   - pod: seccomp filtering, no_new_privs, no effective capabilities;
//   - every rung: each of Unreachable does not answer.
func (f Floor) Missing(r Report) []string {
	var missing []string
	need := func(ok bool, what string, check string) {
		if ok {
			return
		}
		if why := r.Errors[check]; why != "" && check != "" {
			what += " (" + why + ")"
		}
		missing = append(missing, what)
	}
	restricted := func() {
		need(r.Seccomp == "filter", "seccomp filtering (mode "+orNone(r.Seccomp)+")", "status")
		need(r.NoNewPrivs, "no_new_privs", "status")
		need(noCapabilities(r.Capabilities), "no effective capabilities (CapEff "+orNone(r.Capabilities)+")", "status")
	}
	switch f.Rung {
	case RungLandlock:
		need(r.LandlockABI > 0, "Landlock", "landlock")
		if r.LandlockABI > 0 {
			need(r.LandlockRestricts, "a Landlock ruleset that restricts a path", "landlock")
		}
		restricted()
	case RungBubblewrap:
		if f.UserNamespaces {
			need(r.PodUserNamespace, "a user namespace of the pod's own (hostUsers: false)", "userns")
			need(r.NestedUserNamespace, "nested user namespaces that map root", "userns")
		}
	case RungPod:
		restricted()
	}
	for _, name := range f.Unreachable {
		got, probed := r.Reach[name]
		switch {
		case !probed:
			missing = append(missing, name+" not probed")
		case got.Reachable:
			missing = append(missing, name+" unreachable ("+got.How+")")
		}
	}
	return missing
}

// noCapabilities reports whether a CapEff value holds no capability.
func noCapabilities(hex string) bool {
	v, err := strconv.ParseUint(hex, 16, 64)
	return err == nil && v == 0
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Summary says in a few words what confines a pod, for a class's status: the primitives of its
// rung in force and whether metadata answered, e.g. "landlock ABI 7; seccomp filter;
// no_new_privs; no capabilities; metadata unreachable".
func (f Floor) Summary(r Report) string {
	var parts []string
	switch f.Rung {
	case RungLandlock:
		if r.LandlockABI > 0 {
			parts = append(parts, fmt.Sprintf("landlock ABI %d", r.LandlockABI))
		} else {
			parts = append(parts, "no landlock")
		}
	case RungBubblewrap:
		switch {
		case r.PodUserNamespace && r.NestedUserNamespace:
			parts = append(parts, "user namespaces, root mapped")
		case r.NestedUserNamespace:
			parts = append(parts, "host users, nested user namespaces")
		default:
			parts = append(parts, "no user namespaces")
		}
	}
	if r.Seccomp != "" {
		parts = append(parts, "seccomp "+r.Seccomp)
	}
	if r.NoNewPrivs {
		parts = append(parts, "no_new_privs")
	}
	if noCapabilities(r.Capabilities) {
		parts = append(parts, "no capabilities")
	}
	// Each target is said reachable or not, by name; the metadata addresses as one, "metadata
	// unreachable", while none answers, else each that answers by its own name.
	said := map[string]bool{}
	silentMetadata := false
	for name, got := range r.Reach {
		if IsMetadata(name) && !got.Reachable {
			silentMetadata = true
			continue
		}
		said[name] = got.Reachable
	}
	if silentMetadata && !slices.ContainsFunc(slices.Collect(maps.Keys(said)), IsMetadata) {
		said[MetadataTarget] = false
	}
	for _, name := range slices.Sorted(maps.Keys(said)) {
		if said[name] {
			parts = append(parts, name+" reachable")
		} else {
			parts = append(parts, name+" unreachable")
		}
	}
	return strings.Join(parts, "; ")
}

// Result is what a pool pod's probe says in its termination message: the report, its summary
// for the class's status, and what of the floor is missing (none: the pod may run trials).
type Result struct {
	Summary string   `json:"summary"`
	Missing []string `json:"missing,omitempty"`
	Report  Report   `json:"report"`
}

// Judge holds r to the floor.
func (f Floor) Judge(r Report) Result {
	return Result{Summary: f.Summary(r), Missing: f.Missing(r), Report: r}
}
