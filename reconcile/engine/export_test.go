package engine

// What the external tests (package engine_test) reach inside the engine.
var (
	// ChildListWatch is childListWatch.
	ChildListWatch = childListWatch
	// ChildRESTConfig is the engine's REST client's configuration.
	ChildRESTConfig = restClientConfig
	// AcceptChild is the Accept header of the engine's requests for children.
	AcceptChild = acceptChild
	// SameChild is sameChild.
	SameChild = sameChild
	// ResourcePath is resourcePath.
	ResourcePath = resourcePath
)
