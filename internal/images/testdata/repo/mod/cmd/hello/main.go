// Command hello is the command of images' build test: it says who runs it.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Printf("hello as %d\n", os.Getuid()) }
