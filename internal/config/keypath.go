package config

import "fmt"

// keyPath is the path of key under parent as problems name it
// ("provider.timeout"); a top-level key has an empty parent.
func keyPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// itemPath is the path of item i of the list at parent ("producers[2]").
func itemPath(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }
