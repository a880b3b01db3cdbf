-- vramplan.accuracy — how close vramplan has been to the GPU measurements
-- in tests/reference/, by kind of run: written by tools/accuracy.lua
-- --write (tests/lua/accuracy_spec.lua checks it is current); errors are
-- estimate / measured - 1.
return {
  ["full"] = { runs = 34, median_error = 0.075, most_low = -0.279, most_high = 0.013 },
  ["lora"] = { runs = 4, median_error = 0.033, most_low = -0.026, most_high = 0.066 },
}
