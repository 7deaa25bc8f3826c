// Package controller holds the cluster's metadata quorum: its Raft log and stable stores (placeholder; the lead replaces this doc).
package controller
