package durable_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cairn-sd/cairn/internal/durable"
)

// A file kept across restarts is replaced whole: a crash at any point
// leaves the old content or the new.
func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "durable-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "node-id")
	for _, id := range []string{"node-1\n", "node-2\n"} {
		if err := durable.WriteFile(path, []byte(id), 0o600); err != nil {
			panic(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(b))
	// Output: node-2
}

// Content made piece by piece goes straight into the temporary file.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "durable-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "view")
	err = durable.Write(path, 0o600, func(w io.Writer) error {
		if _, err := fmt.Fprintf(w, "header %d\n", 2); err != nil {
			return err
		}
		_, err := io.WriteString(w, "body\n")
		return err
	})
	if err != nil {
		panic(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(b))
	// Output:
	// header 2
	// body
}
