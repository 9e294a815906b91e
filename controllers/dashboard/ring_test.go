package dashboard

import (
	"slices"
	"testing"
)

func TestRingKeepsNewestInOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		pushed int
		want   []int
	}{
		{"empty", 3, 0, []int{}},
		{"partly filled", 3, 2, []int{1, 2}},
		{"exactly full", 3, 3, []int{1, 2, 3}},
		{"wrapped once", 3, 4, []int{2, 3, 4}},
		{"wrapped many times", 3, 10, []int{8, 9, 10}},
		{"size one", 1, 5, []int{5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRing[int](tc.size)
			for i := 1; i <= tc.pushed; i++ {
				r.push(i)
			}
			if got := r.items(); !slices.Equal(got, tc.want) {
				t.Fatalf("items() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRingItemsIsACopy(t *testing.T) {
	r := newRing[int](2)
	r.push(1)
	r.push(2)
	got := r.items()
	r.push(3)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("a later push changed a returned slice: %v", got)
	}
}
