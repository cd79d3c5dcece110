//go:build tools

// The KEDA operator is built from its own package, github.com/kedacore/keda/v2/cmd/operator; this
// keeps its dependencies in go.sum.
package tools

import _ "github.com/kedacore/keda/v2/pkg/scaling"
