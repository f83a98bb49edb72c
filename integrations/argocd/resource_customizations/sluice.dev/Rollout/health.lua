-- Argo CD health of a sluice Rollout (rollouts.sluice.dev): Healthy once the
-- candidate has all the traffic, Degraded after a rollback, an abort or a
-- failure, Suspended while it waits for a person (a gate, a pause),
-- Progressing otherwise. Install it under argocd-cm's
-- resource.customizations.health.sluice.dev_Rollout (docs/gitops.md).
local hs = {}
local st = obj.status
if st == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for sluice to report the rollout"
  return hs
end
if obj.metadata.generation ~= nil and st.observedGeneration ~= nil and st.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for sluice to report the rollout's latest spec"
  return hs
end
local cond = {}
if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    cond[c.type] = c
  end
end
local function say(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end
if cond.Stalled ~= nil and cond.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = say(cond.Stalled, "The rollout of " .. tostring(st.candidate) .. " ended: " .. tostring(st.outcome))
  return hs
end
if cond.Ready ~= nil and cond.Ready.status == "True" then
  hs.status = "Healthy"
  hs.message = say(cond.Ready, tostring(st.candidate) .. " has all the traffic")
  return hs
end
if st.paused == true or st.phase == "Paused" or st.phase == "AwaitingPromotion" then
  hs.status = "Suspended"
  hs.message = say(cond.Reconciling, "The rollout of " .. tostring(st.candidate) .. " waits: " .. tostring(st.phase))
  return hs
end
hs.status = "Progressing"
hs.message = say(cond.Reconciling, "Rolling out " .. tostring(st.candidate))
return hs
