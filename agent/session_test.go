package agent

import (
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestEndpointType: the type URL the agent asks for and accepts is the
// one go-control-plane (and so the server) names EDS by.
func TestEndpointType(t *testing.T) {
	if endpointType != resourcev3.EndpointType {
		t.Errorf("endpointType = %q; want %q", endpointType, resourcev3.EndpointType)
	}
}
