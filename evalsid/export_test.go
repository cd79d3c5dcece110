package evalsid

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// MissNewClasses makes c's cache of SandboxClasses miss every class, as a watch does that has
// not yet brought a class made a moment ago.
func MissNewClasses(c *Cluster) { c.classes = missingClasses{c.classes} }

// missingClasses is a synced informer whose store holds no class.
type missingClasses struct{ cache.SharedIndexInformer }

func (missingClasses) GetStore() cache.Store { return cache.NewStore(cache.MetaNamespaceKeyFunc) }

// MissNewNamespaces makes c's cache of Namespaces miss every namespace, as a watch does that has
// not yet brought a namespace made a moment ago.
func MissNewNamespaces(c *Cluster) { c.namespaces = missingNamespaces{c.namespaces} }

// missingNamespaces is a synced cache that holds no namespace.
type missingNamespaces struct{ namespaceLabels }

func (missingNamespaces) Labels(string) (map[string]string, bool) { return nil, false }

// CountNamespaceReads counts the Namespaces c reads from the API server from now on.
func CountNamespaceReads(c *Cluster) *atomic.Int32 {
	var n atomic.Int32
	read := c.readNamespace
	c.readNamespace = func(ctx context.Context, name string) (*corev1.Namespace, error) {
		n.Add(1)
		return read(ctx, name)
	}
	return &n
}

// LimitTrialsPerRun lowers the bound of one run's trials, so that a test reaches it in a few calls.
func LimitTrialsPerRun(s *Server, n int) { s.maxTrials = n }

// CountedMethods is how many names the server counts calls under.
func CountedMethods(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}
