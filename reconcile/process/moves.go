package process

import (
	"github.com/prometheus/client_golang/prometheus"

	"evals.si/operator/shard"
)

// move is one thing a replica does with a shard, the move label of evalsi_shard_moves_total.
type move string

const (
	// tookWarm and tookCold: the replica took the shard's Lease and reconciles it, with the
	// engine it had warmed or with a new one.
	tookWarm move = "took_warm"
	tookCold move = "took_cold"
	// warmedLate and warmedHandover: it started warming the shard (reading, writing nothing)
	// because its holder is late to renew its Lease, or hands it over to this replica.
	warmedLate     move = "warmed_late"
	warmedHandover move = "warmed_handover"
	// handedOverWarmed and handedOverUnwarmed: it let the shard go to a joining replica once
	// that replica said it had warmed it, or after waiting a Lease's duration without.
	handedOverWarmed   move = "handed_over_warmed"
	handedOverUnwarmed move = "handed_over_unwarmed"
	// drained: it stopped reconciling a shard it held, beyond its share.
	drained move = "drained"
)

// took is the move of taking a shard with a warm engine or a new one.
func took(warm bool) move {
	if warm {
		return tookWarm
	}
	return tookCold
}

// handedOver is the move of handing a shard over, warmed by its taker or not.
func handedOver(warmed bool) move {
	if warmed {
		return handedOverWarmed
	}
	return handedOverUnwarmed
}

// moves counts a replica's moves by shard, so that what the replica did (and a test's claim of
// it) is read from a counter rather than from its log.
type moves struct{ counter *prometheus.CounterVec }

// newMoves returns the counter, every series of the count shards at zero so that a move that
// never happened reads 0 rather than missing.
func newMoves(count int) moves {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "evalsi_shard_moves_total",
		Help: "What this replica did with each shard: took it (warm or cold), warmed it (its holder late, or handing it over), handed it over (warmed by the taker or not), drained it.",
	}, []string{"shard", "move"})
	for i := range count {
		for _, m := range []move{tookWarm, tookCold, warmedLate, warmedHandover, handedOverWarmed, handedOverUnwarmed, drained} {
			c.WithLabelValues(shard.Shard{Index: i, Count: count}.String(), string(m))
		}
	}
	return moves{counter: c}
}

// ShardMovesMetric is the counter evalsi_shard_moves_total of a replica of count shards, as
// Run registers it, for what reads the process's metrics by name (its dashboard's test).
func ShardMovesMetric(count int) prometheus.Collector { return newMoves(count).counter }

// count counts one move of s; a holder without metrics (a unit test's) counts nothing.
func (m moves) count(s shard.Shard, mv move) {
	if m.counter != nil {
		m.counter.WithLabelValues(s.String(), string(mv)).Inc()
	}
}
