// Package apiclient is the client of deputy's own API (what `deputy sync`
// calls): start a sync of an Application, follow its operation over the
// progress stream, read the Application's status. The wire format (paths, content type, the event type) is
// policy/v1alpha1's; the server is package webhook's APIHandler.
//
// It owns the client's transport (TLS with deputy's CA, a bearer token or a
// client certificate) and turning failures into errors a command can explain
// (*StatusError, *CertificateError, ErrWatchEnded). It never logs and puts
// the token only into the Authorization header. It must not import the
// server (webhook, syncer, the authorizer): the client binary links only
// this package and the API types.
package apiclient
