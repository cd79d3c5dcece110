package evalsid_test

import (
	"context"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "evals.si/operator/apiclient/evalsiv1"
	"evals.si/operator/evalsid"
)

// TestOwnersHoldTheirNames runs, over Connect, a sequence of puts and deletes of one policy name
// and one trace source name in one project by two owners (two Kubernetes objects) and by hand (no
// owner): each step's answer, and who holds the name after it. A write naming an owner changes
// only what no one holds or what that owner holds; a write by hand changes it and keeps its owner.
func TestOwnersHoldTheirNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A cluster-wide operator (a platform identity) writes for the objects of every namespace,
	// and so does a platform team's CLI by hand; a namespaced operator writes only for its own
	// namespace's objects (TestProjectBoundaryAtEvalsid).
	srv := evalsid.New(map[string]string{"tok": "system:serviceaccount:evalsi:evalsi-operator"}, evalsid.Schedule{})
	srv.TrustPlatform("system:serviceaccount:evalsi:evalsi-operator")
	base := serveLoopback(t, ctx, srv)
	monitor := newAPI(base, "tok").monitor

	type step struct {
		name     string
		put      bool   // a put, else a delete
		owner    string // who writes ("" by hand)
		want     connect.Code
		heldBy   string // the owner after the step
		existing bool   // whether the name exists after the step
	}
	steps := []step{
		{"made by hand", true, "", 0, "", true},
		{"taken by the first object that puts it", true, "team-a/first", 0, "team-a/first", true},
		{"its holder puts it again", true, "team-a/first", 0, "team-a/first", true},
		{"another object may not put it", true, "team-b/first", connect.CodeAlreadyExists, "team-a/first", true},
		{"another object may not delete it", false, "team-b/first", connect.CodeNotFound, "team-a/first", true},
		{"a put by hand keeps its holder", true, "", 0, "team-a/first", true},
		{"its holder deletes it", false, "team-a/first", 0, "", false},
		{"then another object may take it", true, "team-b/first", 0, "team-b/first", true},
		{"and a delete by hand removes it", false, "", 0, "", false},
	}
	const project, name = "team-a", "shared"
	for _, kind := range []string{"policy", "trace source"} {
		for _, s := range steps {
			var err error
			switch {
			case kind == "policy" && s.put:
				_, err = monitor.PutPolicy(ctx, connect.NewRequest(&v1.PutPolicyRequest{Project: project, Name: name, Owner: s.owner,
					Spec: &v1.PolicySpec{TraceSource: "prod", SamplingRate: 0.1}}))
			case kind == "policy":
				_, err = monitor.DeletePolicy(ctx, connect.NewRequest(&v1.DeletePolicyRequest{Project: project, Name: name, Owner: s.owner}))
			case s.put:
				_, err = monitor.PutTraceSource(ctx, connect.NewRequest(&v1.PutTraceSourceRequest{Project: project, Name: name, Owner: s.owner,
					Spec: &v1.TraceSourceSpec{Type: "otlp"}}))
			default:
				_, err = monitor.DeleteTraceSource(ctx, connect.NewRequest(&v1.DeleteTraceSourceRequest{Project: project, Name: name, Owner: s.owner}))
			}
			if code(err) != s.want {
				t.Errorf("%s: %s: answered %v, want %v", kind, s.name, err, s.want)
			}
			var heldBy string
			var exists bool
			if kind == "policy" {
				p := srv.Policy(name)
				heldBy, exists = p.GetOwner(), p != nil
			} else {
				ts := srv.TraceSource(project, name)
				heldBy, exists = ts.GetOwner(), ts != nil
			}
			if heldBy != s.heldBy || exists != s.existing {
				t.Errorf("%s: %s: held by %q (exists %v), want %q (exists %v)", kind, s.name, heldBy, exists, s.heldBy, s.existing)
			}
		}
	}
}

// serveLoopback serves srv on a loopback port until ctx ends and returns its base URL.
func serveLoopback(t *testing.T, ctx context.Context, srv *evalsid.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ctx, l)
	return "http://" + l.Addr().String()
}
