package engine

// What the external tests (package engine_test) reach inside the engine.
var (
	// ChildListWatch is childListWatch.
	ChildListWatch = childListWatch
	// ChildRESTConfig is the engine's REST client's configuration.
	ChildRESTConfig = restClientConfig
)
