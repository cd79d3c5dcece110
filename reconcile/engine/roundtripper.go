package engine

import "net/http"

// roundTripperFunc is an http.RoundTripper of one function: the wrappers of the engine's
// transport (counting, rate limits, the tenure's fence) are each one.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
