package monitors

import (
	"strings"
	"testing"

	"evals.si/operator/evalsi"
	"evals.si/operator/reconcile/engine"
)

// ready returns the Ready condition of st.
func ready(st *engine.Status) engine.Condition {
	for _, c := range st.Conditions {
		if c.Type == evalsi.ConditionReady {
			return c
		}
	}
	return engine.Condition{}
}

func TestAppliedStatus(t *testing.T) {
	st := appliedStatus("trace source", "team-a", map[string]any{"ingestEndpoint": "https://ingest.example/team-a"})
	if c := ready(st); c.Status != "True" || c.Reason != evalsi.ReasonApplied || !strings.Contains(c.Message, "team-a") {
		t.Errorf("Ready = %+v", c)
	}
	if st.Fields["project"] != "team-a" || st.Fields["ingestEndpoint"] == nil {
		t.Errorf("fields %v", st.Fields)
	}
}
