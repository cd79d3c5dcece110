// Package shard splits the operator's objects among its replicas. An owner belongs to one of
// Buckets buckets by the hash of its UID, and its children carry that bucket as a label
// (evalsi.LabelShardBucket), so that owners and their children land in the same shard. A Shard
// is a range of buckets: its owners are selected by the API server's shardSelector over
// object.metadata.uid (KEP-5866) where the API server serves it, else filtered before caching,
// and its children by a label selector, which every API server serves.
package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Buckets is how many buckets the objects are spread over; it bounds the number of shards.
const Buckets = 64

// bucketBits is log2(Buckets): a bucket is the top bits of the hash.
const bucketBits = 6

// Bucket returns the bucket of the owner whose UID is uid: the top bits of its 64-bit FNV-1a
// hash, the hash the API server's shardSelector computes. UIDs are random, so owners spread
// evenly; a namespace's name would not (names that differ in their last characters differ only
// in the hash's low bits).
func Bucket(uid string) int {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return int(h.Sum64() >> (64 - bucketBits))
}

// Shard is shard Index of Count: the owners whose bucket is in [Index*Buckets/Count,
// (Index+1)*Buckets/Count), and their children.
type Shard struct{ Index, Count int }

// Whole is the one shard of an operator that does not shard: it holds every object.
var Whole = Shard{Index: 0, Count: 1}

// Validate says what is wrong with a shard count.
func Validate(count int) error {
	if count < 1 || count > Buckets {
		return fmt.Errorf("the number of shards must be between 1 and %d, not %d", Buckets, count)
	}
	return nil
}

// IsWhole reports whether s holds every object.
func (s Shard) IsWhole() bool { return s.Count <= 1 }

// Contains reports whether the owner whose UID is uid belongs to s.
func (s Shard) Contains(uid string) bool {
	if s.IsWhole() {
		return true
	}
	lo, hi := s.buckets()
	b := Bucket(uid)
	return b >= lo && b < hi
}

// Selector is s as the shardSelector of a List or Watch of owners (served where the
// ShardedListAndWatch feature gate is on); "" for Whole.
func (s Shard) Selector() string {
	if s.IsWhole() {
		return ""
	}
	lo, hi := s.buckets()
	bound := func(b int) string {
		if b == Buckets {
			return "0x10000000000000000" // 2^64, the exclusive end of the hash space
		}
		return fmt.Sprintf("0x%016x", uint64(b)<<(64-bucketBits))
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", bound(lo), bound(hi))
}

// LabelSelector selects s's children by the bucket label key carries; "" for Whole.
func (s Shard) LabelSelector(key string) string {
	if s.IsWhole() {
		return ""
	}
	lo, hi := s.buckets()
	values := make([]string, 0, hi-lo)
	for b := lo; b < hi; b++ {
		values = append(values, strconv.Itoa(b))
	}
	return key + " in (" + strings.Join(values, ",") + ")"
}

// String names s as logs do: "1/3" is the second of three.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// buckets returns s's range of buckets, [lo, hi).
func (s Shard) buckets() (lo, hi int) {
	return s.Index * Buckets / s.Count, (s.Index + 1) * Buckets / s.Count
}
