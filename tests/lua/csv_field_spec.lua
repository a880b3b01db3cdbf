-- vramplan.csv_field / csv_line (engine/lua/lua_csv.c, what csv.lua writes
-- with): each value's field equals the rules written out here in Lua (the
-- way csv.lua wrote them before they moved to C), on chosen edge cases and
-- on random integers, floats and texts.
require("tests.lua.helper")
local vramplan = require("vramplan")
local csv = require("vramplan.csv")

-- The rules, in Lua: the reference the C formatter is held to.
local function reference(v)
  local t = type(v)
  if v == nil or t == "function" or t == "userdata" then return "" end
  if t == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%.1f", v) end
    local short = string.format("%.15g", v)
    return tonumber(short) == v and short or string.format("%.17g", v)
  end
  local s = tostring(v)
  if s:find('[,"\r\n]') then return '"' .. s:gsub('"', '""') .. '"' end
  return s
end

local edge = {
  0, 1, -1, math.maxinteger, math.mininteger, 0.0, -0.0, 1.0, -1.5, 0.05, 0.1, 1 / 3, 2 ^ 53, 2 ^ 53 - 1, -2 ^ 53,
  2 ^ 63, 1e300, 5e-324, 1 / 0, -1 / 0, 0 / 0, 123456789012345.6, true, false, "", "plain", "a,b", 'say "hi"',
  "line\nbreak", "cr\rhere", "zero\0byte,", "\0", "é,ü", print, io.stdout, setmetatable({}, { __tostring = function()
    return "x,y" end }),
}

describe("csv_field", function()
  it("writes the edge cases as the rules say", function()
    for i, v in ipairs(edge) do
      assert.are.equal(reference(v), vramplan.csv_field(v), "edge case " .. i)
    end
    assert.are.equal("", vramplan.csv_field(nil))
  end)

  it("writes random numbers and texts as the rules say", function()
    math.randomseed(18)
    local chars = { "a", "b", ",", '"', "\n", "\r", " ", "\0", "1" }
    for _ = 1, 20000 do
      local kind, v = math.random(4), nil
      if kind == 1 then v = math.random(math.mininteger, math.maxinteger)
      elseif kind == 2 then v = (math.random() - 0.5) * 10 ^ math.random(-30, 30)
      elseif kind == 3 then v = math.random(-100000, 100000) / 2 ^ math.random(0, 12) + 0.0
      else
        local parts = {}
        for k = 1, math.random(0, 8) do parts[k] = chars[math.random(#chars)] end
        v = table.concat(parts)
      end
      assert.are.equal(reference(v), vramplan.csv_field(v), string.format("%q", v))
    end
  end)
end)

describe("csv_line", function()
  it("joins the fields, nils empty, up to n", function()
    local values = { 1, nil, "a,b", 2.5, true }
    local fields = {}
    for i = 1, 6 do fields[i] = reference(values[i]) end
    assert.are.equal(table.concat(fields, ","), vramplan.csv_line(values, 6))
    assert.are.equal("1", vramplan.csv_line({ 1 }))
    assert.are.equal("", vramplan.csv_line({}))
    assert.are.equal(csv.line(values, 6), vramplan.csv_line(values, 6))
  end)

  it("refuses a bad count by name", function()
    assert.has_error(function() vramplan.csv_line({}, -1) end)
    assert.has_error(function() vramplan.csv_line("x") end)
  end)
end)
