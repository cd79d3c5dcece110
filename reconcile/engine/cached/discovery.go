package cached

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
)

// Discovery answers the engines of one process which resources the API server serves and its
// version, asking the server at most once per group-version (and once for the version) within
// fresh: a replica runs an engine for each shard it holds or warms, and each looks every
// DiscoveryInterval, so that without it a replica of three shards asked three times as often as
// one of one. Answers, errors included, are kept for fresh; zero keeps none.
type Discovery struct {
	ask   discovery.DiscoveryInterface
	fresh time.Duration

	mu      sync.Mutex
	version answer[*version.Info]
	groups  map[string]answer[*metav1.APIResourceList]
}

// answer is one answer of the server and when it came.
type answer[T any] struct {
	at    time.Time
	value T
	err   error
}

// NewDiscovery returns a Discovery asking through ask, keeping answers for fresh.
func NewDiscovery(ask discovery.DiscoveryInterface, fresh time.Duration) *Discovery {
	return &Discovery{ask: ask, fresh: fresh, groups: map[string]answer[*metav1.APIResourceList]{}}
}

// ServerVersion returns the server's version.
func (d *Discovery) ServerVersion() (*version.Info, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.isFresh(d.version.at) {
		v, err := d.ask.ServerVersion()
		d.version = answer[*version.Info]{at: time.Now(), value: v, err: err}
	}
	return d.version.value, d.version.err
}

// ServerResourcesForGroupVersion returns the resources the server serves in groupVersion.
func (d *Discovery) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.groups[groupVersion]
	if !ok || !d.isFresh(a.at) {
		list, err := d.ask.ServerResourcesForGroupVersion(groupVersion)
		a = answer[*metav1.APIResourceList]{at: time.Now(), value: list, err: err}
		d.groups[groupVersion] = a
	}
	return a.value, a.err
}

// isFresh reports whether an answer that came at is still kept.
func (d *Discovery) isFresh(at time.Time) bool {
	return d.fresh > 0 && !at.IsZero() && time.Since(at) < d.fresh
}
