-- pandoc filter for shuck.toml(5): a table becomes a definition list (its first column the
-- term; each other cell a line "header: value"), since man's narrow columns cannot hold
-- metric names and long cells without breaking words.
local function inlines(blocks)
  return pandoc.utils.blocks_to_inlines(blocks)
end

function Table(tbl)
  local headers = {}
  if #tbl.head.rows > 0 then
    for i, cell in ipairs(tbl.head.rows[1].cells) do
      headers[i] = pandoc.utils.stringify(cell.contents)
    end
  end
  local items = {}
  for _, body in ipairs(tbl.bodies) do
    for _, row in ipairs(body.body) do
      local cells = row.cells
      local blocks = {}
      for i = 2, #cells do
        local value = inlines(cells[i].contents)
        if #value > 0 then
          if headers[i] and headers[i] ~= "" then
            value:insert(1, pandoc.Str(headers[i] .. ": "))
          end
          table.insert(blocks, pandoc.Para(value))
        end
      end
      local defs = { blocks }
      table.insert(items, { inlines(cells[1].contents), defs })
    end
  end
  return pandoc.DefinitionList(items)
end
