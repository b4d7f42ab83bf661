package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// Readiness says when a dependent is ready: the operator has done what it
// does with it, so that a run may delete it. One of Condition or JSONPath.
type Readiness struct {
	// Condition is the type of a status condition (status.conditions[])
	// the dependent must have.
	Condition string `json:"condition,omitempty" tmpl:"-"`
	// Status is the status the condition must have; empty is "True".
	Status string `json:"status,omitempty" tmpl:"-"`
	// Reason, when set, is the reason the condition must have too.
	Reason string `json:"reason,omitempty" tmpl:"-"`
	// JSONPath is a JSONPath expression on the dependent, as kubectl's
	// (kubectl get -o jsonpath, kubectl wait --for=jsonpath): a status
	// field ({.status.phase}) or a filter ({.status.nodes[?(@.ready==true)].name});
	// the braces may be left out.
	JSONPath string `json:"jsonPath,omitempty" tmpl:"-"`
	// Value, when set, is what every result of JSONPath must equal, as
	// text (a number as 3, a boolean as true); empty is at least one
	// result, none of them empty.
	Value string `json:"value,omitempty" tmpl:"-"`
}

// Readiness problems, named at load.
var (
	errReadyNone   = errors.New("one of condition or jsonPath required")
	errReadyBoth   = errors.New("condition and jsonPath both set: give one")
	errReadyStatus = errors.New("status and reason go with condition")
	errReadyValue  = errors.New("value goes with jsonPath")
)

// readyCheck is a dependent's readiness rule, compiled.
type readyCheck struct {
	rule Readiness
	jp   *jsonpath.JSONPath // with rule.JSONPath
}

// compileReady checks a rule and compiles its JSONPath.
func compileReady(r Readiness) (*readyCheck, error) {
	switch {
	case r.Condition == "" && r.JSONPath == "":
		return nil, errReadyNone
	case r.Condition != "" && r.JSONPath != "":
		return nil, errReadyBoth
	case r.Condition == "" && (r.Status != "" || r.Reason != ""):
		return nil, errReadyStatus
	case r.JSONPath == "" && r.Value != "":
		return nil, errReadyValue
	}
	rd := &readyCheck{rule: r}
	if r.Condition != "" {
		if rd.rule.Status == "" {
			rd.rule.Status = "True"
		}
		return rd, nil
	}
	expr := r.JSONPath
	if !strings.HasPrefix(strings.TrimSpace(expr), "{") {
		// Without braces JSONPath reads the text as a literal, which
		// every object would match.
		expr = "{" + expr + "}"
	}
	rd.jp = jsonpath.New("ready").AllowMissingKeys(true)
	if err := rd.jp.Parse(expr); err != nil {
		return nil, fmt.Errorf("jsonPath %q: %w", r.JSONPath, err)
	}
	return rd, nil
}

// String says the rule as the timeline and the violations name it.
func (rd *readyCheck) String() string {
	r := rd.rule
	if r.Condition != "" {
		s := r.Condition + "=" + r.Status
		if r.Reason != "" {
			s += " (reason " + r.Reason + ")"
		}
		return s
	}
	if r.Value == "" {
		return r.JSONPath + " set"
	}
	return r.JSONPath + "=" + r.Value
}

// ready decides whether obj (an object as the apiserver returned it)
// meets the rule; when it does not, why names what obj has instead.
func (rd *readyCheck) ready(obj map[string]any) (ok bool, why string) {
	if rd.jp == nil {
		return rd.conditionMet(obj)
	}
	results, err := rd.jp.FindResults(obj)
	if err != nil {
		return false, fmt.Sprintf("%s: %v", rd.rule.JSONPath, err)
	}
	var got []string
	for _, rs := range results {
		for _, v := range rs {
			got = append(got, valueText(v))
		}
	}
	if len(got) == 0 {
		return false, fmt.Sprintf("%s gives nothing", rd.rule.JSONPath)
	}
	for _, g := range got {
		if (rd.rule.Value == "" && g == "") || (rd.rule.Value != "" && g != rd.rule.Value) {
			return false, fmt.Sprintf("%s is %s", rd.rule.JSONPath, strings.Join(got, " "))
		}
	}
	return true, ""
}

// conditionMet is the rule on status.conditions.
func (rd *readyCheck) conditionMet(obj map[string]any) (bool, string) {
	r := rd.rule
	status, _ := obj["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != r.Condition {
			continue
		}
		if m["status"] == r.Status && (r.Reason == "" || m["reason"] == r.Reason) {
			return true, ""
		}
		return false, fmt.Sprintf("%s=%v (reason %v: %v)", r.Condition, m["status"], m["reason"], m["message"])
	}
	return false, "no " + r.Condition + " condition"
}

// valueText is one JSONPath result as text: a string as it is, anything
// else as JSON would write it (3, true, a map as {...}).
func valueText(v reflect.Value) string {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.String {
		return v.String()
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return string(b)
}

// readyCheck is the dependents' readiness rule (dependents.ready, or the
// older dependents.readyCondition), nil when the description gives none.
func (s *Spec) readyCheck() (*readyCheck, error) {
	d := s.Dependents
	switch {
	case d.Ready != nil && d.ReadyCondition != "":
		return nil, errors.New("set with dependents.readyCondition: give one")
	case d.Ready != nil:
		return compileReady(*d.Ready)
	case d.ReadyCondition != "":
		return compileReady(Readiness{Condition: d.ReadyCondition})
	}
	return nil, nil
}
