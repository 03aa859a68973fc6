// Package connlimit bounds the connections a listener holds open: in total, and per
// client (remote IP address), so that one client that opens connections and never
// finishes a request cannot take every connection a server is willing to hold. It is
// for the servers that any pod can reach: the extension's HTTPS ports and the agent's
// health and metrics ports on the host network.
//
// A connection over its client's share is closed as soon as it is accepted (that
// client's own requests fail, nobody else's); a connection over the total waits in
// the kernel's accept queue until one closes (as golang.org/x/net/netutil's
// LimitListener). Time bounds (how long a connection may take to send a request,
// stay idle) are the server's: this package only counts.
//
// Imports: the standard library only.
package connlimit
