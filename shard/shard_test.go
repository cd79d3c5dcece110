package shard

import (
	"fmt"
	"regexp"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// selectorForm is the one form of Selector: one shardRange over the UID.
var selectorForm = regexp.MustCompile(`^shardRange\(object\.metadata\.uid, '(0x[0-9a-f]{16,17})', '(0x[0-9a-f]{16,17})'\)$`)

// TestShardsAgreeWithKubernetes checks that every UID belongs to exactly one shard of a count, and
// to the shard whose selector Kubernetes' own matcher (the API server's) accepts it by: the
// client-side filter and the server-side shardSelector pick the same owners. The API server
// itself is asked in package reconcile (TestShardedReplicas).
func TestShardsAgreeWithKubernetes(t *testing.T) {
	for _, count := range []int{1, 2, 3, 5, 64} {
		selectors := make([]apisharding.Selector, count)
		for i := range count {
			s := Shard{Index: i, Count: count}
			if s.IsWhole() {
				selectors[i] = apisharding.Everything()
				continue
			}
			m := selectorForm.FindStringSubmatch(s.Selector())
			if m == nil {
				t.Fatalf("%s: selector %q", s, s.Selector())
			}
			selectors[i] = apisharding.NewSelector(apisharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: m[1], End: m[2]})
		}
		for range 2000 {
			uid := uuid.NewUUID()
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "x"}}
			var in []int
			for i := range count {
				s := Shard{Index: i, Count: count}
				server, err := selectors[i].Matches(obj)
				if err != nil {
					t.Fatal(err)
				}
				if s.Contains(string(uid)) != server {
					t.Fatalf("%s: UID %s (bucket %d): Contains %v, Kubernetes' selector %v", s, uid, Bucket(string(uid)), s.Contains(string(uid)), server)
				}
				if server {
					in = append(in, i)
				}
			}
			if len(in) != 1 {
				t.Fatalf("%d shards: UID %s is in shards %v, want exactly one", count, uid, in)
			}
		}
	}
}

// TestShardsSpread checks that 3,000 random owners spread over two and three shards within 15%
// of each shard's share of the buckets (three shards hold 21, 21 and 22 of 64): about six standard
// deviations, so it does not fail by chance, while a hash that clusters (as FNV-1a of namespace
// names does) fails it.
func TestShardsSpread(t *testing.T) {
	for _, count := range []int{2, 3} {
		counts := make([]int, count)
		for range 3000 {
			uid := string(uuid.NewUUID())
			for i := range count {
				if (Shard{Index: i, Count: count}).Contains(uid) {
					counts[i]++
				}
			}
		}
		for i, c := range counts {
			lo, hi := (Shard{Index: i, Count: count}).buckets()
			if share := 3000 * (hi - lo) / Buckets; c < share*85/100 || c > share*115/100 {
				t.Errorf("shard %d/%d holds %d of 3000 owners", i, count, c)
			}
		}
	}
}

// TestLabelSelector checks that a shard's children's selector names exactly its buckets.
func TestLabelSelector(t *testing.T) {
	for name, c := range map[string]struct {
		s    Shard
		want string
	}{
		"whole":         {Whole, ""},
		"first of two":  {Shard{0, 2}, "k in (" + seq(0, 32) + ")"},
		"last of three": {Shard{2, 3}, "k in (" + seq(42, 64) + ")"},
	} {
		if got := c.s.LabelSelector("k"); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
	if err := Validate(65); err == nil {
		t.Error("65 shards accepted")
	}
}

func seq(lo, hi int) string {
	s := ""
	for i := lo; i < hi; i++ {
		if i > lo {
			s += ","
		}
		s += fmt.Sprint(i)
	}
	return s
}
