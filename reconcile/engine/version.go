package engine

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/version"

	"evals.si/operator/evalsi"
)

// serverMinor returns "major.minor" of a server version, tolerating the "+" that some providers
// append to the minor ("37+").
func serverMinor(v *version.Info) string {
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+")
}

// versionVerdict decides what the engine does on a server of version v: whether the minor is the
// supported one, and whether to reconcile (a server on another minor is refused unless require is
// off). why says so in a sentence for the log and /readyz.
func versionVerdict(v *version.Info, require bool) (supported, reconcile bool, why string) {
	if minor := serverMinor(v); minor != evalsi.KubernetesMinor {
		why = fmt.Sprintf("Kubernetes %s (minor %s) is not the supported minor %s", v.GitVersion, minor, evalsi.KubernetesMinor)
		if require {
			return false, false, why + ": not reconciling (--require-supported-minor=false runs anyway, unsupported)"
		}
		return false, true, why + ": reconciling anyway (--require-supported-minor=false)"
	}
	return true, true, ""
}

// checkServerVersion reads the server's version, records it in the metrics, and logs when the
// verdict changes. It returns false when the engine must not reconcile. A version that cannot be
// read keeps the last verdict (an API server restarting is no reason to stop or to start).
func (e *Engine) checkServerVersion() bool {
	v, err := e.kube.Discovery().ServerVersion()
	if err != nil {
		e.log.Warn("reading the Kubernetes version", "err", err)
		return e.VersionRefusal() == ""
	}
	supported, reconcile, why := versionVerdict(v, !e.cfg.AllowUnsupportedMinor)
	e.metrics.setServerVersion(v.GitVersion, supported)
	refusal := ""
	if !reconcile {
		refusal = why
	}
	e.refusal.Store(refusal)
	if why != e.lastVersionWhy { // only Run's goroutine reads and writes it
		switch {
		case !reconcile:
			e.log.Error(why, "serverVersion", v.GitVersion, "supportedMinor", evalsi.KubernetesMinor)
		case !supported:
			e.log.Warn(why, "serverVersion", v.GitVersion, "supportedMinor", evalsi.KubernetesMinor)
		case e.lastVersionWhy != "":
			e.log.Info("the Kubernetes minor is supported again", "serverVersion", v.GitVersion)
		}
		e.lastVersionWhy = why
	}
	return reconcile
}

// versionRefusal says why the engine does not reconcile on this server, or "" when it does.
func (e *Engine) VersionRefusal() string {
	why, _ := e.refusal.Load().(string)
	return why
}
