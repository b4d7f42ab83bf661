package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/finale-dev/finale/controlplane"
)

func children() float64 {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &r)
	return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)/1e6
}

func main() {
	ctx := context.Background()
	var flags []string
	if len(os.Args) > 1 && os.Args[1] != "" {
		flags = strings.Split(os.Args[1], " ")
	}
	t0 := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{APIServerFlags: flags})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("started in", time.Since(t0))
	c, _ := client.New(cp.Config, client.Options{})
	for i := 0; i < 5; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("ns", i)}}
		if err := c.Create(ctx, ns); err != nil {
			panic(err)
		}
		for j := 0; j < 10; j++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cm", j), Namespace: ns.Name}}
			if err := c.Create(ctx, cm); err != nil {
				panic(err)
			}
		}
		t1 := time.Now()
		c.Delete(ctx, ns)
		for {
			err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns)
			if apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Println("ns deleted in", time.Since(t1))
	}
	time.Sleep(30 * time.Second)
	cp.Stop()
	fmt.Printf("children CPU %.2f s\n", children())
}
