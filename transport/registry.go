package transport

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler serves one API key over a range of versions.
type handler struct {
	min, max int16
	serve    func(c *conn, req *request) (responseWriter, error)
}

// handlers are the APIs the server implements, registered by the files
// named after their keys.
var handlers = map[int16]handler{}

// register adds the handler of an API: fn gets the decoded request and
// returns the response (nil for no response, as acks=0 produce) or an
// error that closes the connection.
func register[Req kmsg.Request](key kmsg.Key, min, max int16, fn func(c *conn, req *request, body Req) (kmsg.Response, error)) {
	handlers[key.Int16()] = makeHandler(min, max, fn)
}

func makeHandler[Req kmsg.Request](min, max int16, fn func(c *conn, req *request, body Req) (kmsg.Response, error)) handler {
	return handler{min: min, max: max, serve: func(c *conn, req *request) (responseWriter, error) {
		start := time.Now()
		resp, err := fn(c, req, req.body.(Req))
		if err != nil {
			return nil, err
		}
		c.applyQuotas(req, start, resp) // resp nil: an acks=0 produce, counted too
		if resp == nil {
			return nil, nil
		}
		resp.SetVersion(req.version)
		return encoded(resp), nil
	}}
}

// registerRaw adds a handler that writes its own response (fetch, with
// record bytes sent from files).
func registerRaw(key kmsg.Key, min, max int16, fn func(c *conn, req *request) (responseWriter, error)) {
	handlers[key.Int16()] = handler{min: min, max: max, serve: fn}
}

// advertised lists the implemented APIs and versions, by key: on the
// controller listener (controller) its own APIs too.
func advertised(controller bool) []kmsg.ApiVersionsResponseApiKey {
	all := map[int16]handler{}
	for k, h := range handlers {
		all[k] = h
	}
	if controller {
		for k, h := range controllerHandlers {
			all[k] = h
		}
	}
	keys := make([]int, 0, len(all))
	for k := range all {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(keys))
	for _, k := range keys {
		h := all[int16(k)]
		out = append(out, kmsg.ApiVersionsResponseApiKey{ApiKey: int16(k), MinVersion: h.min, MaxVersion: h.max})
	}
	return out
}

// preAuthAllowed reports whether a request may come before SASL
// authentication completes.
func preAuthAllowed(key int16) bool {
	switch kmsg.Key(key) {
	case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return true
	}
	return false
}
