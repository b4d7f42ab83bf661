// Package check is the deletion test for any operator: it runs the
// operator under test against a real local control plane, makes a world of
// its objects, deletes it in every order and under faults, and checks that
// every deletion finished, nothing was left in the external service and
// nothing was created twice. It needs nothing from the operator but a
// description; it is what `finale check` runs.
package check
