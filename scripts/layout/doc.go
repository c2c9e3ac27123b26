// Package layout holds the checks that keep the repository's shape: the
// renderer fleet is the product and must build without the dev tooling in
// scripts/, and gpu-fleet/cmd holds only the binary that ships.
package layout
