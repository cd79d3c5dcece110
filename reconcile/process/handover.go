package process

// The handover of a shard to a replica that joined: the joiner warms the shards the holders over
// their share will drain to it (holding.Joining) and says in its member slot which of them have
// synced; a holder drains such a shard once the joiner says so, or after a Lease duration if it
// never does (a joiner of an older version, or one that failed to warm it).

import (
	"context"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"evals.si/operator/shard"
	"evals.si/operator/shard/holding"
)

// announceWarmed writes into l, this replica's member slot about to be renewed, the shards it
// warms to take from their holders whose engines have synced (none: no annotation).
func (h *shardHolder) announceWarmed(l *coordinationv1.Lease) {
	var ready []string
	h.mu.Lock()
	for _, i := range h.joining {
		if _, warm := h.warm[i]; warm && h.synced(shard.Shard{Index: i, Count: h.count}) {
			ready = append(ready, strconv.Itoa(i))
		}
	}
	h.mu.Unlock()
	if len(ready) == 0 {
		delete(l.Annotations, holding.AnnotationWarmed)
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[holding.AnnotationWarmed] = strings.Join(ready, ",")
}

// holdBack returns the shards this replica leads beyond share that it keeps this round
// (holding.HandOver, waiting up to a Lease duration for the taker to warm each), and counts and
// logs each one it lets go, with whether its taker had warmed it.
func (h *shardHolder) holdBack(others []holding.Lease, share int, now time.Time) []int {
	var leading []int
	for _, t := range h.current() {
		if t.isLeading() {
			leading = append(leading, t.Index)
		}
	}
	ho := holding.HandOver(holding.Drains(h.id, leading, share), others, h.drainWanted, now, h.timings.LeaseDuration)
	h.drainWanted = ho.Since
	for _, r := range ho.Release {
		s := shard.Shard{Index: r.Shard, Count: h.count}
		h.moves.count(s, handedOver(r.Warmed))
		h.log.Info("handing a shard over", "shard", s.String(), "warmedByTaker", r.Warmed)
	}
	return ho.Keep
}

// warmJoining starts the engines, without writes, of the shards this replica takes from their
// holders (h.joining) that it neither warms nor tries yet.
func (h *shardHolder) warmJoining(ctx context.Context, holders map[int]holding.Lease) {
	var start []int
	h.mu.Lock()
	for _, i := range h.joining {
		_, warm := h.warm[i]
		_, tried := h.tries[i]
		if !warm && !tried {
			start = append(start, i)
		}
	}
	h.mu.Unlock()
	for _, i := range start {
		h.startWarm(ctx, i, warmedHandover, "warming a shard: its holder hands it over to this replica", holders[i].Holder)
	}
}
