// Package httpfence carries a lease's fencing token to a service over HTTP,
// and fences the service's writes with it.
//
// A client holding a lease sends its key and token in two request headers
// (SetToken); the service wraps its write handlers in Middleware, which
// refuses a token lower than the highest it has admitted for the key with
// 409 Conflict and an application/problem+json body, and runs the handler
// under the fence otherwise. CheckResponse turns that 409 back into a
// *lease.StaleTokenError on the client.
//
// Client:
//
//	req, _ := http.NewRequestWithContext(ctx, "PUT", svc+"/invoices/7", body)
//	httpfence.SetToken(req.Header, l.Key(), l.Token()) // Lockmesh-Key, Lockmesh-Fencing-Token
//	resp, err := http.DefaultClient.Do(req)
//	...
//	if err := httpfence.CheckResponse(resp); errors.Is(err, lease.ErrStaleToken) {
//		// our lease ended and a newer holder has written: stop
//	}
//
// Service, with the tokens kept in its PostgreSQL database:
//
//	fence, _ := sqlfence.New(sqlfence.Config{Dialect: sqlfence.PostgreSQL})
//	mw, _ := httpfence.Middleware(httpfence.Config{
//		Fence: httpfence.SQL(fence, db),
//		Key:   func(r *http.Request) (string, error) { return "invoice/" + r.PathValue("id"), nil },
//	})
//	mux.Handle("PUT /invoices/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//		tx, _ := httpfence.Tx(r.Context()) // read and write through tx
//		...
//	})))
//
// # Check and write are one step
//
// A middleware that checked the token and then let the handler write would
// leave a gap: a newer holder's request could check and write in between,
// and the older write would land on top of it (the difference between
// lease.Fence.Admit and lease.Fence.Apply). So the middleware runs the whole
// handler inside Fence.Apply. With Memory, the key's lock is held while the
// handler runs. With SQL, the handler's transaction begins with the
// admission of the token, which locks the key's fence row until the
// transaction commits after the handler returns: the handler must read and
// write through Tx(r.Context()), not through the database handle, or its
// writes are not fenced. The response is held back until the commit, so
// that a client is never told of a write that did not commit.
//
// # Which key
//
// The key that guards a resource is the service's to say: set Config.Key to
// derive it from the request (its path, say). A client fenced out under one
// key could otherwise send another key, one under which its token is still
// current, and write the same rows. A Lockmesh-Key header that disagrees with
// Config.Key is refused with 400.
package httpfence
