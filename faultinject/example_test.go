package faultinject_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/finale-dev/finale/faultinject"
)

// A cached connection goes silent while a fresh dial still works.
func ExampleProxy_Freeze() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()

	p, err := faultinject.NewProxy(ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	ask := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		_, err := bufio.NewReader(c).ReadString('\n')
		return err
	}

	cached, _ := net.Dial("tcp", p.Addr())
	defer cached.Close()
	fmt.Println("cached before:", ask(cached) == nil)

	p.Freeze()
	fmt.Println("cached frozen:", ask(cached) == nil)

	fresh, _ := net.Dial("tcp", p.Addr())
	defer fresh.Close()
	fmt.Println("fresh dial:", ask(fresh) == nil)
	fmt.Println("accepted:", p.Accepted())
	// Output:
	// cached before: true
	// cached frozen: false
	// fresh dial: true
	// accepted: 2
}

// Fail the second ConfigMap create, and crash right after the first Secret
// write lands.
func ExampleScript() {
	s := faultinject.NewScript(
		faultinject.Fault{Verb: faultinject.Create, Kind: "ConfigMap", Nth: 2, Err: faultinject.Conflict("configmaps", "x")},
		faultinject.Fault{Verb: faultinject.Create, Kind: "Secret", Nth: 1, Crash: true},
	)
	s.OnCrash = func() { fmt.Println("crash: cancel the manager here") }
	// c := faultinject.WrapClient(mgr.GetClient(), s), or from
	// manager.Options.NewClient for the whole manager.
	fmt.Println(s.Writes(), s.Crashed())
	// Output: 0 false
}
