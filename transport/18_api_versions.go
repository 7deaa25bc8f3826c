package transport

import (
	"regexp"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { register(kmsg.ApiVersions, 0, 4, apiVersions) }

// Kafka's check of ApiVersions v3's client software name and version.
var softwareRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

func apiVersions(c *conn, req *request, body *kmsg.ApiVersionsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrApiVersionsResponse()
	if req.version >= 3 && (!softwareRe.MatchString(body.ClientSoftwareName) || !softwareRe.MatchString(body.ClientSoftwareVersion)) {
		resp.ErrorCode = errInvalidRequest
		return resp, nil
	}
	resp.ApiKeys = advertised(c.controller)
	return resp, nil
}

// apiVersionsUnsupported answers an ApiVersions request of a version the
// server does not know (KIP-511): a v0-shaped body with
// UNSUPPORTED_VERSION and the versions of ApiVersions itself, from which the
// client picks one to retry with.
func apiVersionsUnsupported() responseWriter {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = errUnsupportedVersion
	h := handlers[kmsg.ApiVersions.Int16()]
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: kmsg.ApiVersions.Int16(), MinVersion: h.min, MaxVersion: h.max}}
	return encoded(resp)
}
