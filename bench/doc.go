// Package bench will hold the harnesses that put the same in-memory pool behind
// a round-robin balancer, HAProxy and Fuge side by side and print a table of
// the results. Nothing imports it. It arrives with a later issue; nothing here
// yet.
package bench
