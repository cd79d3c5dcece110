package evalsid

import "testing"

// TestCallLogKeepsTheMostRecent fills the call log past its size: it keeps the most recent calls,
// in order, and no more.
func TestCallLogKeepsTheMostRecent(t *testing.T) {
	l := callLog{max: 3}
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		l.add(Call{Method: m})
	}
	var got []string
	for _, c := range l.calls() {
		got = append(got, c.Method)
	}
	if want := []string{"c", "d", "e"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("calls %v, want %v", got, want)
	}
}
