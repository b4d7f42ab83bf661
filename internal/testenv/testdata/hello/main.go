// Command hello is what TestBuildAsTheTestBinary builds.
package main

func main() {}
