// Package layout holds the checks that keep the repository's shape: the
// renderer fleet is the product and must build without the dev tooling in
// scripts/ or the HTTP API, gpu-fleet/cmd holds only the binary that ships,
// rendering links no database, the conversation no provider client, and no
// file points outside a plain clone.
package layout
