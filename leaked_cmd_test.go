package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestLeakReason(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	server := func(age time.Duration, owners ...metav1.OwnerReference) *unstructured.Unstructured {
		s := &unstructured.Unstructured{}
		s.SetCreationTimestamp(metav1.NewTime(now.Add(-age)))
		s.SetOwnerReferences(owners)
		return s
	}
	pod := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "watcher", UID: "u"}
	for name, tc := range map[string]struct {
		server *unstructured.Unstructured
		gone   []string
		want   string
	}{
		"owned by a live pod, however old": {server(72*time.Hour, pod), nil, ""},
		"its owner is gone":                {server(time.Minute, pod), []string{"its owner Pod watcher is gone"}, "its owner Pod watcher is gone"},
		"two bad references, both said": {server(time.Minute, pod, pod), []string{"its owner Pod watcher is gone", "its owner Job x is of a kind the API server does not serve (batch/v9)"},
			"its owner Pod watcher is gone; its owner Job x is of a kind the API server does not serve (batch/v9)"},
		"no owner, younger than the limit": {server(time.Hour, nil...), nil, ""},
		"no owner, as old as the limit":    {server(6*time.Hour, nil...), nil, "no owner, and older than 6h0m0s"},
		"no owner, older than the limit":   {server(7*time.Hour, nil...), nil, "no owner, and older than 6h0m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := leakReason(tc.server, tc.gone, now, 6*time.Hour); got != tc.want {
				t.Errorf("leakReason = %q, want %q", got, tc.want)
			}
		})
	}
}
