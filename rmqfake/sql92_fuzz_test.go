package rmqfake

import (
	"strings"
	"testing"
)

// FuzzSQL92 compiles arbitrary expressions and evaluates them on arbitrary
// properties ("k=v" lines): nothing panics, and an expression that compiles
// prints back as SQL92 that compiles to the same expression (same print,
// same answer on the properties).
func FuzzSQL92(f *testing.F) {
	for _, s := range []string{
		"a = 3", "a = '3'", "a = 3.0", "a > 2 AND b IN ('x', 'it''s')", "a BETWEEN 1 AND 5", "a NOT BETWEEN 1 AND 2",
		"c IS NULL OR a IS NOT NULL", "NOT a = '3'", "NOT (a = 3)", "b CONTAINS 'x'", "b NOT STARTSWITH 'y'",
		"b ENDSWITH 'z'", "TRUE", "a", "a = '3' xyz", "a > -1", "- - 3 > 1", "a = 9223372036854775807L",
		"a > 4.9e-324", "a > 0.0", "a /* c */ = 3 -- d\n", "'x' <> c", "(a = 1) = (b = 2)", "a = 1 = 2",
		"((((a))))", "a IN (3)", "a != 1", "", "a > b", "a = TRUE", "1 = TRUE", "TRUE = 1", "NULL IS NULL",
	} {
		f.Add(s, "a=3\nb=x")
	}
	f.Add("x > 1.5", "x=NaN")
	f.Add("u = 3", "u=٣")
	f.Fuzz(func(t *testing.T, expr, rawProps string) {
		props := map[string]string{}
		for _, line := range strings.Split(rawProps, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				props[k] = v
			}
		}
		e, err := compileSQL92(expr)
		if err != nil {
			return
		}
		got := e.matches(mapProps(props))
		printed := e.String()
		e2, err := compileSQL92(printed)
		if err != nil {
			if strings.Contains(err.Error(), "nested too deeply") {
				return // the printer adds parentheses
			}
			t.Fatalf("%q prints as %q, which does not compile: %v", expr, printed, err)
		}
		if p2 := e2.String(); p2 != printed {
			t.Fatalf("%q prints as %q, which prints as %q", expr, printed, p2)
		}
		if got2 := e2.matches(mapProps(props)); got2 != got {
			t.Fatalf("%q matches %v on %v, its print %q %v", expr, got, props, printed, got2)
		}
	})
}
